from __future__ import annotations

import pytest
import yaml
from conftest import REPO

from tokenmill.jobs.config import ConfigError, PipelineConfig, load_config


def test_defaults_file_equals_the_code_defaults():
    documented = load_config(REPO / "jobs" / "defaults.yaml")
    assert documented == PipelineConfig()
    assert documented.hash() == PipelineConfig().hash()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ingest.bogus=1", "ingest.bogus: unknown key"),
        ("nosuch.key=1", "nosuch: unknown key"),
        ("ingest.max_html_bytes=abc", "ingest.max_html_bytes: expected int"),
        ("ingest.max_html_bytes=true", "ingest.max_html_bytes: expected int"),
        ("ingest.max_html_bytes=0", "ingest.max_html_bytes: must be > 0"),
        ("ingest.max_bad_char_fraction=1.5", "ingest.max_bad_char_fraction: must lie in [0, 1]"),
        ("ingest.extractor=beautifulsoup", "ingest.extractor: must be"),
        ("ingest.html_content_types=[1]", "ingest.html_content_types[0]: expected str"),
        ("spark.conf={foo: bar}", "spark.conf.foo: Spark keys start with"),
        ("ingest=3", "ingest: expected a mapping"),
        ("novalue", "expected section.key=value"),
    ],
)
def test_bad_values_name_their_key(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert message in str(e.value)


def test_yaml_file_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"ingest": {"max_html_bytes": 1000, "extractor": "trafilatura"}}))
    cfg = load_config(f, ["ingest.max_html_bytes=2000", "spark.conf={spark.x.y: '1'}"])
    assert cfg.ingest.max_html_bytes == 2000
    assert cfg.ingest.extractor == "trafilatura"
    assert cfg.spark.conf == {"spark.x.y": "1"}
    assert cfg.hash() != PipelineConfig().hash()


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ingest: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        load_config(listy)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty) == PipelineConfig()

"""The PII job on real Spark and Delta over the sample crawl: every planted value masked, counts
per type in `runs`, nothing logged, reruns computing nothing, pattern mode."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import REPO, TEST_SPARK_CONF, VENV_BIN

from tokenmill.jobs import ingest, pii
from tokenmill.jobs.runtime import delta_version
from tokenmill.udfs.pii import DEFAULT_REPLACEMENTS

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]


def run(root, *args) -> int:
    return pii.main(["--root", str(root), *args, *SETS])


def table(spark, root, name):
    return spark.read.format("delta").load(f"{root}/{name}")


def last_run(spark, root):
    return table(spark, root, "runs").where("job = 'pii'").orderBy("started_at").collect()[-1]


@pytest.fixture(scope="module")
def planted(sample_crawl):
    crawl, _ = sample_crawl
    labels = map(json.loads, (crawl / "labels.jsonl").read_text("utf-8").splitlines())
    return {lab["doc_id"]: lab["pii"] for lab in labels
            if lab["kind"] == "pii" and lab["expected_ingest"] == "kept"}


@pytest.fixture(scope="module")
def lake(spark, sample_crawl, tmp_path_factory):
    crawl, _ = sample_crawl
    root = tmp_path_factory.mktemp("pii-lake")
    assert ingest.main(["--root", str(root), "--input", str(crawl / "*.warc.gz"), *SETS]) == 0
    return root


@pytest.fixture(scope="module")
def ner_run(spark, lake):
    """The first run as the README documents it, a real spark-submit: its output holds the
    driver's, the JVM's and the Python workers' logs (where Presidio runs)."""
    out = subprocess.run(
        [str(VENV_BIN / "spark-submit"), str(REPO / "jobs" / "pii.py"), "--root", str(lake),
         *SETS],
        capture_output=True, text=True, timeout=900, env={**os.environ,
                                                         "TOKENMILL_LOG_LEVEL": "DEBUG"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_every_planted_value_is_masked(spark, lake, planted, ner_run):
    assert planted, "the sample crawl plants PII"
    clean = {r["doc_id"]: r for r in table(spark, lake, "clean").collect()}
    assert len(clean) == table(spark, lake, "docs").count()  # nothing dropped
    for doc_id, values in planted.items():
        text = clean[doc_id]["text"]
        for item in values:
            assert item["value"] not in text, item["type"]
            assert DEFAULT_REPLACEMENTS[item["type"]] in text
        assert clean[doc_id]["text_length"] == len(text)
    # Counts per document and per type.
    for doc_id, values in planted.items():
        row = clean[doc_id]
        for item in values:
            assert row[f"pii_{item['type'].lower()}"] >= 1
        assert row["pii_masked"] >= len(values)


def test_runs_count_each_type(spark, lake, planted, ner_run):
    counts = last_run(spark, lake)["counts"]
    planted_types = {}
    for values in planted.values():
        for item in values:
            planted_types[item["type"]] = planted_types.get(item["type"], 0) + 1
    for t, n in planted_types.items():
        assert counts[t.lower()] >= n, t
    clean = table(spark, lake, "clean")
    assert counts["masked"] == clean.agg({"pii_masked": "sum"}).collect()[0][0]
    assert counts["docs_masked"] >= len(planted)


def test_no_value_reaches_the_log(planted, ner_run):
    printed = ner_run
    assert "pii succeeded" in printed
    for values in planted.values():
        for item in values:
            assert item["value"] not in printed


def test_rerun_computes_nothing(spark, lake, ner_run):
    version = delta_version(spark, f"{lake}/pii_signals")
    before = sorted((r["doc_id"], r["text"]) for r in table(spark, lake, "clean").collect())
    assert run(lake) == 0
    assert last_run(spark, lake)["counts"]["signals_computed"] == 0
    assert delta_version(spark, f"{lake}/pii_signals") == version
    after = sorted((r["doc_id"], r["text"]) for r in table(spark, lake, "clean").collect())
    assert after == before


def test_pattern_mode_and_custom_masks(spark, lake, planted, ner_run):
    assert run(lake, "--set", "pii.mode=patterns",
               "--set", "pii.replacements={EMAIL_ADDRESS: '[email]'}") == 0
    counts = last_run(spark, lake)["counts"]
    assert counts["signals_computed"] > 0  # a new mode is a new signal key
    assert counts.get("person", 0) == 0
    clean = {r["doc_id"]: r["text"] for r in table(spark, lake, "clean").collect()}
    for doc_id, values in planted.items():
        for item in values:
            if item["type"] == "PERSON":
                continue
            assert item["value"] not in clean[doc_id]
        assert "[email]" in clean[doc_id] and "<EMAIL>" not in clean[doc_id]
    # Back to the defaults: the pattern-mode masks replaced the stored ones, so NER reruns.
    assert run(lake) == 0
    assert last_run(spark, lake)["counts"]["signals_computed"] > 0


def test_bad_pii_config_is_refused(lake, capsys):
    assert run(lake, "--set", "pii.entities=[EMAIL, PHONE]") == 2
    assert "pii.entities: unknown type 'EMAIL'" in capsys.readouterr().err

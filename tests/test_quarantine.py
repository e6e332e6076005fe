"""Quarantine files (tokenize/quarantine.py): what the trainer writes and the tokenize job
reads. No Spark: the trainer imports this module."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tokenmill.tokenize.quarantine import (
    QuarantineEntry,
    parse_entries,
    read_entries,
    write_entries,
)


def entry(doc_id="cc-001", doc_index=3, step=120, sample=4711):
    return QuarantineEntry(doc_id=doc_id, shard="tokenize_shards-r1/cc/part-00002",
                           doc_index=doc_index, source="cc", reason="loss_spike", step=step,
                           train_run="run-a", sample=sample)


def test_write_then_read_round_trip(tmp_path):
    path = tmp_path / "quarantine" / "run-a.jsonl"
    first = [entry(), entry(doc_id=None, doc_index=7)]
    write_entries(path, first)
    assert read_entries([path]) == first
    # Appending keeps the old lines; the file is rewritten whole and renamed, so no
    # temporary is left beside it for the job's glob to find.
    later = [entry(doc_id="wikipedia-ü", step=900)]
    write_entries(path, later)
    assert read_entries([path]) == first + later
    assert [p.name for p in path.parent.iterdir()] == ["run-a.jsonl"]
    lines = path.read_text().splitlines()
    assert json.loads(lines[1])["doc_id"] is None
    assert lines[2].isascii()


def test_write_refuses_names_the_job_would_skip(tmp_path):
    with pytest.raises(ValueError, match=r"\.jsonl"):
        write_entries(tmp_path / "run-a.json", [entry()])


def test_blank_lines_skipped_and_extra_keys_ignored(tmp_path):
    line = json.loads(entry().to_json())
    text = "\n" + json.dumps({**line, "loss": 9.5}) + "\n   \n\n"
    assert parse_entries(text, "q.jsonl") == [entry()]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "q.jsonl:2: not JSON"),
        ("[1, 2]", "q.jsonl:2: expected a JSON object"),
        ('{"doc_id": "a"}', "q.jsonl:2: missing key(s) shard, source"),
        ("doc_id=7", "q.jsonl:2: not JSON"),
    ],
)
def test_malformed_lines_name_file_and_line(line, message):
    text = entry().to_json() + "\n" + line + "\n"
    with pytest.raises(ValueError) as e:
        parse_entries(text, "q.jsonl")
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("doc_id", 7, "doc_id must be a string or null"),
        ("shard", None, "shard must be a string"),
        ("step", "120", "step must be an integer >= 0"),
        ("sample", True, "sample must be an integer >= 0"),
        ("doc_index", -1, "doc_index must be an integer >= 0"),
        ("doc_index", 1.0, "doc_index must be an integer >= 0"),
    ],
)
def test_wrong_types_name_the_key(key, value, message):
    line = {**json.loads(entry().to_json()), key: value}
    with pytest.raises(ValueError, match=f"q.jsonl:1: {message}"):
        parse_entries(json.dumps(line), "q.jsonl")


def test_read_entries_names_the_file(tmp_path):
    good, bad = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_entries(good, [entry()])
    bad.write_text(entry().to_json() + "\n\n{oops\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}:3: not JSON")):
        read_entries([good, bad])


def test_module_imports_without_spark():
    code = ("import sys, tokenmill.tokenize.quarantine; "
            "sys.exit(any(m.startswith(('pyspark', 'py4j')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

"""Ingest on real Spark (local[2]) and real Delta tables, checked against the sample crawl's
labels, plus reruns, kill-and-rerun, bad files, JSONL sources and spark-submit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from conftest import REPO, TEST_SPARK_CONF

from tokenmill.jobs import ingest
from tokenmill.jobs.runtime import CRASH_AFTER_STEP, EXIT_PARTIAL, delta_version

SPARK_SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]


def labels(crawl_dir):
    return [json.loads(line) for line in (crawl_dir / "labels.jsonl").read_text().splitlines()]


def run_ingest(root, *args: str) -> int:
    return ingest.main(["--root", str(root), *args, *SPARK_SETS])


def load(spark, root, table):
    return spark.read.format("delta").load(f"{root}/{table}")


@pytest.fixture(scope="module")
def lake(spark, sample_crawl, tmp_path_factory):
    crawl_dir, _ = sample_crawl
    root = tmp_path_factory.mktemp("lake")
    assert run_ingest(root, "--input", f"{crawl_dir}/*.warc.gz", "--run-id", "first") == 0
    return root


def test_counts_per_reason_equal_the_labels(spark, sample_crawl, lake):
    crawl_dir, summary = sample_crawl
    expected = Counter(lab["expected_ingest"] for lab in labels(crawl_dir))
    assert expected == Counter(summary["expected_ingest"])

    rejected = Counter(
        r["reason"]
        for r in load(spark, lake, "rejections").select("reason").collect()
    )
    assert rejected == Counter({k: v for k, v in expected.items() if k != "kept"})

    run = load(spark, lake, "runs").where("run_id = 'first'").collect()[0]
    assert run["status"] == "succeeded"
    assert {k: v for k, v in run["counts"].items() if k in expected} == {
        k: v for k, v in expected.items() if k != "kept"
    }
    assert run["rows_out"] == expected["kept"] == load(spark, lake, "docs").count()
    assert run["rows_in"] == summary["responses"]
    assert run["output_table"] == "docs" and run["output_version"] == delta_version(
        spark, f"{lake}/docs"
    )


def test_kept_documents_are_the_labelled_ones(spark, sample_crawl, lake):
    crawl_dir, _ = sample_crawl
    by_id = {lab["doc_id"]: lab for lab in labels(crawl_dir) if lab["doc_id"]}
    docs = {r["doc_id"]: r for r in load(spark, lake, "docs").collect()}
    assert set(docs) == {d for d, lab in by_id.items() if lab["expected_ingest"] == "kept"}
    for doc_id, doc in docs.items():
        lab = by_id[doc_id]
        assert doc["url"] == lab["url"] and doc["host"] == lab["host"]
        assert doc["source"] == "cc" and doc["text_length"] == len(doc["text"]) > 0
        assert doc["crawl_id"] == "CC-MAIN-SAMPLE" and doc["run_id"] == "first"
        if lab.get("probe"):  # legacy charsets decoded correctly
            assert lab["probe"] in doc["text"], (lab["charset"], doc["charset"])
    # Every rejected response is traceable to its record.
    for r in load(spark, lake, "rejections").where("reason != 'corrupt_record'").collect():
        assert by_id[r["doc_id"]]["expected_ingest"] == r["reason"]
        assert r["stage"] == "ingest" and r["source_path"].endswith(by_id[r["doc_id"]]["file"])


def test_ledger_lists_every_file_done(spark, sample_crawl, lake):
    _, summary = sample_crawl
    rows = load(spark, lake, "warcs").collect()
    assert sorted(os.path.basename(r["path"]) for r in rows) == sorted(summary["files"])
    assert {r["status"] for r in rows} == {"done"}
    assert sum(r["responses"] for r in rows) == summary["responses"]


def test_another_delta_reader_opens_the_tables(spark, lake):
    from deltalake import DeltaTable

    for table in ("docs", "warcs", "rejections", "runs"):
        dt = DeltaTable(str(lake / table))
        assert dt.to_pyarrow_table().num_rows == load(spark, lake, table).count()
    props = DeltaTable(str(lake / "docs")).metadata().configuration
    assert props["tokenmill.schema_version"] == "1"


def test_rerun_changes_nothing(spark, sample_crawl, lake):
    crawl_dir, _ = sample_crawl
    before = {t: delta_version(spark, f"{lake}/{t}") for t in ("docs", "rejections", "warcs")}
    docs_before = sorted(load(spark, lake, "docs").drop("run_id").collect())
    assert run_ingest(lake, "--input", f"{crawl_dir}/*.warc.gz", "--run-id", "again") == 0
    after = {t: delta_version(spark, f"{lake}/{t}") for t in ("docs", "rejections", "warcs")}
    assert after == before
    assert sorted(load(spark, lake, "docs").drop("run_id").collect()) == docs_before
    run = load(spark, lake, "runs").where("run_id = 'again'").collect()[0]
    assert run["counts"]["skipped_already_ingested"] == 3 and run["rows_out"] == 0


def test_new_empty_and_missing_files(spark, sample_crawl, tmp_path):
    crawl_dir, _ = sample_crawl
    first = sorted(crawl_dir.glob("*.warc.gz"))[0]
    empty = tmp_path / "empty.warc.gz"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(b"<html>not a warc</html>\n" * 50)
    listing = tmp_path / "inputs.txt"
    listing.write_text(f"{first}\n{empty}\n{junk}\n{tmp_path / 'missing.warc.gz'}\n")
    root = tmp_path / "lake"
    assert run_ingest(root, "--input", str(listing), "--run-id", "mixed") == EXIT_PARTIAL
    ledger = {os.path.basename(r["path"]): r for r in load(spark, root, "warcs").collect()}
    assert ledger[first.name]["status"] == "done"
    assert ledger["empty.warc.gz"]["status"] == "done" and ledger["empty.warc.gz"]["error"]
    assert ledger["junk.warc.gz"]["status"] == "failed"
    assert ledger["missing.warc.gz"]["status"] == "failed"
    assert "FileNotFoundError" in ledger["missing.warc.gz"]["error"]
    run = load(spark, root, "runs").where("run_id = 'mixed'").collect()[0]
    assert run["status"] == "partial"
    assert run["counts"]["empty_file"] == 1 and run["counts"]["unreadable_file"] == 1
    assert run["counts"]["failed_file"] == 2
    # The next run retries the failed files only, and they are still failing.
    assert run_ingest(root, "--input", str(listing), "--run-id", "retry") == EXIT_PARTIAL
    run = load(spark, root, "runs").where("run_id = 'retry'").collect()[0]
    assert run["counts"]["skipped_already_ingested"] == 2


def test_bad_arguments_fail_fast(tmp_path, capsys):
    assert run_ingest(tmp_path, "--input", str(tmp_path / "nothing-*.warc.gz")) == 2
    assert "matched no file" in capsys.readouterr().err
    assert run_ingest(tmp_path, "--input", "x", "--set", "ingest.max_html_bytes=-5") == 2
    assert "ingest.max_html_bytes: must be > 0" in capsys.readouterr().err


def test_jsonl_source_with_field_mapping(spark, tmp_path):
    src = tmp_path / "wiki"
    src.mkdir()
    rows = [
        {"page_id": 1, "body": "Rivers carry water to the sea.", "link": "https://en.wiki.org/R"},
        {"page_id": 2, "body": "Mountains are tall.", "link": "https://en.wiki.org/M"},
        {"page_id": None, "body": "no id here", "link": None},
        {"page_id": 4, "body": None, "link": None},
    ]
    (src / "part-0.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    root = tmp_path / "lake"
    args = ["--input", f"{src}/*.jsonl", "--format", "jsonl", "--source", "wikipedia",
            "--set", "ingest.id_field=page_id", "--set", "ingest.text_field=body",
            "--set", "ingest.url_field=link"]
    assert run_ingest(root, *args) == 0
    docs = {r["text"]: r for r in load(spark, root, "docs").collect()}
    assert set(docs) == {rows[0]["body"], rows[1]["body"]}
    from tokenmill.udfs.ids import doc_id_from_source_key

    assert docs[rows[0]["body"]]["doc_id"] == doc_id_from_source_key("wikipedia", "1")
    assert docs[rows[0]["body"]]["source"] == "wikipedia"
    assert docs[rows[0]["body"]]["domain"] == "wiki.org"
    rejected = load(spark, root, "rejections").collect()
    assert [r["reason"] for r in rejected] == ["bad_source_row"] * 2
    # A mapping to a column that is not there names the key.
    assert run_ingest(tmp_path / "lake2", *args[:6], "--set", "ingest.text_field=nope") == 2


def _spark_submit(root, inputs, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    cmd = [shutil.which("spark-submit", path=os.path.dirname(sys.executable)) or "spark-submit",
           "jobs/ingest.py", "--root", str(root), "--input", inputs, *SPARK_SETS]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("crash_after", ["write rejections"])
def test_killed_run_and_rerun_equal_an_uninterrupted_run(spark, sample_crawl, lake, tmp_path,
                                                        crash_after):
    """spark-submit exactly as the README shows it, killed right after a table write, then
    run again: the tables equal the uninterrupted run's (no duplicates, nothing lost)."""
    crawl_dir, _ = sample_crawl
    root = tmp_path / "lake"
    crashed = _spark_submit(root, f"{crawl_dir}/*.warc.gz", {CRASH_AFTER_STEP: crash_after})
    assert crashed.returncode == 137, crashed.stderr[-3000:]
    assert delta_version(spark, f"{root}/warcs") is None  # ledger never written
    rerun = _spark_submit(root, f"{crawl_dir}/*.warc.gz")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "ingest succeeded" in rerun.stdout

    def content(r, table, drop):
        return sorted(tuple(row) for row in load(spark, r, table).drop(*drop).collect())

    assert content(root, "docs", ["run_id"]) == content(lake, "docs", ["run_id"])
    assert content(root, "rejections", ["run_id"]) == content(lake, "rejections", ["run_id"])
    assert load(spark, root, "docs").count() == load(spark, root, "docs").select(
        "doc_id").distinct().count()
    statuses = load(spark, root, "runs").select("status").collect()
    assert sorted(r["status"] for r in statuses) == ["running", "succeeded"]

"""Gates inside real jobs: a failing suite fails the job (exit 4) and marks the version in
`runs`; the next stage refuses that version; a passing rerun lets it through. Task and CPU
seconds are recorded per run; a lake with the v1 `runs` schema is migrated in place."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from conftest import TEST_SPARK_CONF
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from tokenmill.jobs import langid, urlfilter
from tokenmill.jobs.runtime import EXIT_GATE, EXIT_USAGE, conform, ensure_table
from tokenmill.jobs.sample_crawl import reference_corpus
from tokenmill.schemas.tables import DOCS, RUNS, Table

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]


@pytest.fixture(autouse=True)
def gates_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENMILL_GATES", "on")


def write_docs(spark, root: str, n: int = 40) -> None:
    texts = reference_corpus("en", n, seed=5)
    rows = [
        {"doc_id": f"d{i:03d}", "source": "cc", "url": f"https://example{i}.org/a",
         "host": f"example{i}.org", "domain": f"example{i}.org", "text": t,
         "text_length": len(t), "text_hash": f"h{i}", "run_id": "test"}
        for i, t in enumerate(texts)
    ]
    df = with_missing_columns(spark.createDataFrame(rows), DOCS)
    conform(df, DOCS).write.format("delta").save(f"{root}/docs")


def with_missing_columns(df, table: Table):
    return df.select("*", *[F.lit(None).cast(f.dataType).alias(f.name)
                            for f in table.schema.fields if f.name not in df.columns])


def runs(spark, root: str, job: str) -> list:
    return (spark.read.format("delta").load(f"{root}/runs").where(f"job = '{job}'")
            .orderBy("started_at").collect())


def test_failing_gate_blocks_the_next_stage_until_a_passing_run(spark, tmp_path, capsys):
    root = str(tmp_path / "lake")
    write_docs(spark, root)

    # A contract the output cannot meet: no document may be longer than 50 characters.
    rc = langid.main(["--root", root, *SETS, "--set", "gates.max_text_chars=50"])
    assert rc == EXIT_GATE
    err = capsys.readouterr().err
    assert "gate failed" in err and "langid" in err
    bad = runs(spark, root, "langid")[-1]
    assert bad["status"] == "failed" and bad["gate_status"] == "failed"
    assert "text" in bad["gate_summary"]
    assert bad["counts"]["gate_failures"] >= 1
    docs = tmp_path / "lake" / "_reports" / "data_docs" / bad["run_id"]
    assert list(docs.rglob("index.html"))

    # The next stage will not read that version.
    assert urlfilter.main(["--root", root, *SETS]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"refusing to read langid@v{bad['output_version']}" in err
    assert runs(spark, root, "urlfilter")[-1]["status"] == "failed"

    # The stage rerun under the real contract passes, and the pipeline moves on.
    assert langid.main(["--root", root, *SETS]) == 0
    good = runs(spark, root, "langid")[-1]
    assert good["gate_status"] == "passed" and good["gate_summary"] is None
    assert good["counts"]["gate_expectations"] > 5
    assert urlfilter.main(["--root", root, *SETS]) == 0
    assert runs(spark, root, "urlfilter")[-1]["gate_status"] == "passed"

    # Cost accounting: every finished run carries its executors' time.
    for r in (good, runs(spark, root, "urlfilter")[-1]):
        assert r["task_seconds"] > 0 and r["cpu_seconds"] >= 0


def test_v1_runs_table_is_migrated(spark, tmp_path):
    path = str(tmp_path / "runs")
    v2 = ("gate_status", "gate_summary", "task_seconds", "cpu_seconds")
    old = dataclasses.replace(RUNS, version=1, schema=type(RUNS.schema)(
        [f for f in RUNS.schema.fields if f.name not in v2]))
    ensure_table(spark, path, old)
    row = spark.createDataFrame(
        [("ingest", "r1", "succeeded", "abc", datetime.now(UTC))],
        "job string, run_id string, status string, config_hash string, started_at timestamp",
    )
    conform(with_missing_columns(row, old), old).write.format("delta").mode("append").save(path)
    ensure_table(spark, path, RUNS)
    table = spark.read.format("delta").load(path)
    assert {"gate_status", "gate_summary", "task_seconds", "cpu_seconds"} <= set(table.columns)
    assert table.count() == 1 and table.first()["gate_status"] is None
    # (SHOW TBLPROPERTIES redacts it: Spark hides values whose key contains "token".)
    props = DeltaTable.forPath(spark, path).detail().first()["properties"]
    assert props["tokenmill.schema_version"] == "2"

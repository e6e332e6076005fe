"""Data-quality gates: each suite catches the defect it names, with a readable line, and lets a
well-formed, pipeline-like table through. One Great Expectations run costs a few seconds of
Spark jobs, so each frame below carries several defects at once."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pyspark.sql.types import StructField, StructType

from tokenmill.jobs.config import GatesConfig, LangidConfig, PipelineConfig
from tokenmill.jobs.gates import check_shards_against_manifest, run_gate
from tokenmill.schemas.expectations import (
    DOCS_COLUMNS,
    EMAIL_PATTERN,
    PHONE_PATTERN,
    SUITES,
    expectations_for,
    suite_name,
)
from tokenmill.schemas.tables import (
    DEDUP_EXTRA_COLUMNS,
    DOCS,
    LANGID_SIGNALS,
    PII_SIGNALS,
    QUALITY_DERIVED,
    QUALITY_SIGNALS,
    SHARD_DOCS,
    URLFILTER_SIGNALS,
)

# English and German kept; German pages need a surer language ID than the default 0.65.
CONFIG = PipelineConfig(langid=LangidConfig(languages=("en", "de"), thresholds={"de": 0.8}))
# Every column a document has by the end of the pipeline (the `clean` table's input columns).
PIPELINE_FIELDS = [
    *DOCS.schema.fields,
    *(StructField(n, t) for n, t in (*LANGID_SIGNALS, *URLFILTER_SIGNALS, *QUALITY_SIGNALS,
                                     *QUALITY_DERIVED, *DEDUP_EXTRA_COLUMNS, *PII_SIGNALS)),
]
# Nullable, so that a test can write the nulls the gates must catch.
SCHEMA = StructType([StructField(f.name, f.dataType, True) for f in PIPELINE_FIELDS])
WORDS = ("river", "garden", "market", "bridge", "harbour", "orchard", "library", "station",
         "festival", "meadow")


def text_of(i: int) -> str:
    # Distinct after dedup's normalisation (digits all become 0, so words carry the number).
    a, b, c = WORDS[i % 10], WORDS[i // 10 % 10], WORDS[i // 100 % 10]
    return (f"The {a} near the {b} reopened on 2024-05-01 after the {c} works; tickets cost "
            f"$12.50 and the guide (ISBN 978-3-16-148410-0) lists 1990, 2000 and 2010.")


def doc(i: int, **values) -> dict:
    row = {f.name: None for f in SCHEMA}
    text = values.pop("text", text_of(i))
    row.update(
        doc_id=f"d{i:04d}", source="cc", url=f"https://example.org/{i}", text=text,
        text_length=len(text or ""), text_hash=f"h{i}", run_id="ingest-1",
        fetch_time=datetime(2024, 5, 1, tzinfo=UTC), lang="en", lang_score=0.93,
        boilerplate_lines=0, pii_masked=0,
    )
    row.update(values)
    return row


def frame(spark, rows):
    return spark.createDataFrame([tuple(r[f.name] for f in SCHEMA) for r in rows], SCHEMA)


def pipeline_like(spark, n: int = 20):
    """Well-formed: one German page above its threshold, masks where PII was."""
    rows = [doc(i) for i in range(n)]
    rows[1].update(lang="de", lang_score=0.86)
    rows[2].update(text=text_of(2) + " Write to <EMAIL> or call <PHONE>.", pii_masked=2)
    return frame(spark, rows)


def test_every_suite_names_required_columns_a_pipeline_table_has():
    names = {f.name for f in SCHEMA}
    for table in ("docs", "langid", "urlfilter", "quality", "deduped", "clean"):
        required = expectations_for(table, CONFIG)[0].column_set
        assert set(DOCS_COLUMNS) <= set(required) <= names | {"exact_hash"}, table
    assert set(SUITES) >= {"docs", "langid", "urlfilter", "quality", "deduped", "clean",
                           SHARD_DOCS.name}


def test_unknown_table_is_an_error_and_disabled_gates_skip(spark):
    with pytest.raises(ValueError, match="known: docs, langid"):
        run_gate(spark, "nosuch", None, CONFIG, None, "r1")
    off = PipelineConfig(gates=GatesConfig(enabled=False))
    result = run_gate(spark, "docs", None, off, None, "r1")
    assert (result.passed, result.evaluated) == (True, 0)
    assert "skipped" in result.summary()


def test_residual_pii_patterns():
    email, phone = re.compile(EMAIL_PATTERN), re.compile(PHONE_PATTERN)
    assert email.search("write to jane.doe@example.org today")
    assert not email.search("write to <EMAIL> today, or @handle, or a@b")
    for number in ("(415) 555-0123", "415-555-0123", "+1 415.555.0123", "+44 20 7946 0958"):
        assert phone.search(f"call {number} now"), number
    for text in (text_of(7), "call <PHONE>", "order 12345678901", "v1.2.3.4", "10-20-2024"):
        assert not phone.search(text), text


def test_langid_gate_names_each_broken_rule_and_writes_data_docs(spark, tmp_path):
    rows = [
        doc(0),
        doc(1, doc_id=None),
        doc(2, doc_id="dup"),
        doc(3, doc_id="dup"),
        doc(4, text=""),
        doc(5, lang="fr", lang_score=0.95),
        doc(6, lang_score=0.41),
        doc(7, lang="de", lang_score=0.75),  # above min_score, below de's own 0.8
        doc(8, lang="de", lang_score=0.85),
    ]
    result = run_gate(spark, "langid", frame(spark, rows), CONFIG, str(tmp_path), "langid-r1")
    assert not result.passed
    assert result.rows == 9
    assert sorted(result.failures) == sorted([
        "langid: doc_id not null failed for 1 of 9 rows (unexpected: null)",
        "langid: doc_id unique failed for 2 of 9 rows (unexpected: dup, dup)",
        "langid: text length in [1, 2000000] failed for 1 of 9 rows (lengths: 0)",
        "langid: lang in {en, de} failed for 1 of 9 rows (unexpected: fr)",
        "langid: lang_score >= 0.8 where lang = de failed for 1 of 2 rows (unexpected: 0.75)",
        "langid: lang_score >= 0.65 where lang not in {de} failed for 1 of 7 rows "
        "(unexpected: 0.41)",
    ])
    assert result.evaluated == len(expectations_for("langid", CONFIG))
    summary = result.summary()
    assert summary.startswith(f"gate langid: FAILED 6 of {result.evaluated} expectations")
    assert "Data Docs: " in summary
    index = tmp_path / "index.html"
    assert result.docs_path == str(index)
    assert suite_name("langid") in index.read_text(encoding="utf-8")
    assert list(tmp_path.glob("validations/**/langid-r1/**/*.html"))


def test_pipeline_like_frame_passes_langid_and_clean(spark):
    df = pipeline_like(spark)
    for table in ("langid", "clean"):
        result = run_gate(spark, table, df, CONFIG, None, "r1")
        assert result.passed, result.summary()
        assert (result.failures, result.rows, result.docs_path) == ([], 20, None)
        assert result.summary().startswith(f"gate {table}: passed {result.evaluated} expectations")


def test_deduped_gate_recomputes_the_exact_hash(spark):
    # Same text after normalisation (case, punctuation, digits), different stored text_hash:
    # the gate hashes the text as dedup does, so the stale column cannot hide the pair.
    rows = [doc(i) for i in range(6)]
    rows[5].update(text=text_of(4).upper().replace(";", " ;").replace("2024", "1999"))
    result = run_gate(spark, "deduped", frame(spark, rows), CONFIG, None, "dedup-r1")
    assert len(result.failures) == 1, result.summary()
    assert result.failures[0].startswith(
        "deduped: no exact duplicates (normalised-text hash unique) failed for 2 of 6 rows "
        "(unexpected: ")


def test_clean_gate_bounds_residual_pii(spark):
    rows = [doc(i) for i in range(100)]
    for i in range(0, 100, 20):  # 5% still hold an address
        rows[i].update(text=f"{text_of(i)} Write to jane.doe{i}@example.org for details.")
    result = run_gate(spark, "clean", frame(spark, rows), CONFIG, None, "pii-r1")
    # The texts are not shown: they hold the personal data the gate found.
    assert result.failures == [
        "clean: e-mail addresses left in at most 0.10% of documents failed for 5 of 100 rows "
        "(5.00%)"
    ]


SHARD = "tok-r1/cc/part-00000"


def shard_docs(spark, rows):
    """(doc_index, tokens) pairs of one shard, each row its own document."""
    return spark.createDataFrame(
        [(SHARD, i, f"d{k}", "cc", tokens, "tok-r1") for k, (i, tokens) in enumerate(rows)],
        SHARD_DOCS.schema,
    )


def test_shard_docs_gate(spark):
    good = run_gate(spark, "shard_docs", shard_docs(spark, [(0, 5), (1, 3), (2, 1)]), CONFIG,
                    None, "tok-r1")
    assert good.passed, good.summary()
    bad = run_gate(spark, "shard_docs", shard_docs(spark, [(0, 5), (1, 0), (1, 3)]), CONFIG,
                   None, "tok-r1")
    assert sorted(bad.failures) == [
        f"shard_docs: (shard, doc_index) unique failed for 2 of 3 rows (unexpected: "
        f"({SHARD}, 1), ({SHARD}, 1))",
        "shard_docs: tokens > 0 failed for 1 of 3 rows (unexpected: 0)",
    ]


def test_shards_against_manifest(spark, tmp_path):
    from tokenmill.tokenize.manifest import ShardEntry, build_manifest, write_manifest
    from tokenmill.tokenize.shards import ShardWriter

    run_dir = tmp_path / "shards" / "tok-r1"
    (run_dir / "cc").mkdir(parents=True)
    lengths = [5, 3, 1]
    with ShardWriter(run_dir / "cc" / "part-00000", vocab_size=1000) as w:
        for n in lengths:
            w.add_document(list(range(1, n + 1)))
    entry = ShardEntry(path="cc/part-00000", source="cc", documents=3, tokens=9, dtype="uint16")
    tokenizer = {"path": "t.model", "sha256": "0", "vocab_size": 1000, "eos_id": 1}
    manifest, _ = build_manifest([entry], tokenizer)
    write_manifest(manifest, run_dir / "manifest.json")

    agreeing = shard_docs(spark, list(enumerate(lengths)))
    assert check_shards_against_manifest(run_dir / "manifest.json", agreeing) == []

    one_missing = shard_docs(spark, [(0, 5), (1, 3)])
    with open(run_dir / "cc" / "part-00000.bin", "ab") as f:
        f.write(b"\0\0")  # one token too many on disk
    assert check_shards_against_manifest(run_dir / "manifest.json", one_missing) == [
        f"shard {SHARD}: shard_docs has 2 documents, the manifest 3",
        f"shard {SHARD}: shard_docs has 8 tokens, the manifest 9",
        f"shard {SHARD}: .bin holds 20 bytes, 9 tokens × 2 = 18 expected",
    ]

"""Tokenizer training and shard writing on real Spark and Delta: a deterministic model, shards
that read back token-identical to encoding each document, shard_docs, and the manifest."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import sentencepiece as spm
from conftest import TEST_SPARK_CONF

from tokenmill.jobs import tokenize_shards, train_tokenizer
from tokenmill.jobs.sample_crawl import reference_corpus
from tokenmill.tokenize.manifest import read_manifest, shard_prefix
from tokenmill.tokenize.quarantine import QuarantineEntry, write_entries
from tokenmill.tokenize.shards import ShardReader, read_doc_ids

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}", "--set=tokenizer.vocab_size=600",
        "--set=shards.partitions=3"]


def write_clean(spark, root) -> dict[str, tuple[str, str]]:
    docs = {}
    for source, lang, n in (("cc", "en", 40), ("wikipedia", "en", 12)):
        for i, text in enumerate(reference_corpus(lang, n, seed=5 if source == "cc" else 6)):
            docs[f"{source}-{i:03d}"] = (source, text)
    rows = [(d, s, t) for d, (s, t) in docs.items()]
    spark.createDataFrame(rows, "doc_id string, source string, text string") \
        .write.format("delta").mode("overwrite").save(f"{root}/clean")
    return docs


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("tok-lake")
    docs = write_clean(spark, root)
    assert train_tokenizer.main(["--root", str(root), *SETS]) == 0
    assert tokenize_shards.main(["--root", str(root), *SETS]) == 0
    return root, docs


def tokenizer(root):
    meta = json.loads((root / "tokenizer" / "latest.json").read_text())
    return meta, spm.SentencePieceProcessor(model_file=str(root / "tokenizer" / meta["path"]))


def test_same_seed_and_table_give_the_same_model(spark, lake, tmp_path):
    root, _ = lake
    write_clean(spark, tmp_path)
    assert train_tokenizer.main(["--root", str(tmp_path), *SETS]) == 0
    a, _ = tokenizer(root)
    b, _ = tokenizer(tmp_path)
    assert a["sha256"] == b["sha256"]
    assert (root / "tokenizer" / a["path"]).read_bytes() == (
        tmp_path / "tokenizer" / b["path"]).read_bytes()
    assert train_tokenizer.main(["--root", str(tmp_path), *SETS, "--set=tokenizer.seed=2",
                                 "--set=tokenizer.sample_fraction=0.5"]) == 0
    c, _ = tokenizer(tmp_path)
    assert c["sha256"] != a["sha256"] and c["sample"]["documents"] < a["sample"]["documents"]


def test_tokenizer_round_trip_and_byte_fallback(lake):
    root, docs = lake
    meta, sp = tokenizer(root)
    assert meta["vocab_size"] == sp.get_piece_size() <= 600 and meta["eos_id"] == sp.eos_id()
    for _, text in list(docs.values())[:10]:
        assert sp.decode(sp.encode(text)) == text
    odd = "Zürich → 東京 🚀"
    ids = sp.encode(odd)
    assert sp.unk_id() not in ids and sp.decode(ids) == odd


def test_shards_read_back_token_identical(spark, lake):
    root, docs = lake
    meta, sp = tokenizer(root)
    manifest_path = root / "shards" / "manifest.json"
    manifest = read_manifest(manifest_path, check_files=True)
    index = spark.read.format("delta").load(f"{root}/shard_docs").collect()
    assert len(index) == len(docs) and {r["doc_id"] for r in index} == set(docs)
    readers = {e.path: ShardReader(shard_prefix(manifest_path, e)) for e in manifest.shards}
    for r in index:
        reader = readers[r["shard"]]
        tokens = reader[r["doc_index"]]
        source, text = docs[r["doc_id"]]
        assert r["source"] == source
        assert tokens.dtype == np.uint16
        assert tokens.tolist() == [*sp.encode(text), meta["eos_id"]]
        assert r["tokens"] == len(tokens)
    # One shard per source and partition; the manifest's counts are the shards' counts.
    assert {e.source for e in manifest.shards} == {"cc", "wikipedia"}
    for e in manifest.shards:
        assert readers[e.path].num_tokens == e.tokens and len(readers[e.path]) == e.documents
    assert manifest.tokenizer["sha256"] == meta["sha256"]
    assert manifest.inputs == {"clean": 0}


def test_manifest_weights_renormalised_over_present_sources(lake):
    root, _ = lake
    manifest = read_manifest(root / "shards" / "manifest.json")
    cc, wiki = manifest.weights["cc"], manifest.weights["wikipedia"]
    assert set(manifest.weights) == {"cc", "wikipedia"}
    assert cc + wiki == pytest.approx(1.0)
    assert cc / wiki == pytest.approx(0.67 / 0.045)


def test_missing_tokenizer_is_a_clear_error(spark, tmp_path, capsys):
    write_clean(spark, tmp_path)
    assert tokenize_shards.main(["--root", str(tmp_path), *SETS]) == 2
    assert "run jobs/train_tokenizer.py first" in capsys.readouterr().err


def test_megatron_core_reads_the_shards_as_written(spark, lake):
    """Megatron-LM's own reader (megatron-core's IndexedDataset) on our .bin/.idx pairs."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, docs = lake
    meta, sp = tokenizer(root)
    manifest_path = root / "shards" / "manifest.json"
    manifest = read_manifest(manifest_path)
    by_shard: dict[str, dict[int, str]] = {}
    for r in spark.read.format("delta").load(f"{root}/shard_docs").collect():
        by_shard.setdefault(r["shard"], {})[r["doc_index"]] = r["doc_id"]
    seen = 0
    for entry in manifest.shards:
        prefix = str(shard_prefix(manifest_path, entry))
        theirs = IndexedDataset(prefix)
        ours = ShardReader(prefix)
        assert len(theirs) == len(ours) == entry.documents
        assert list(theirs.document_indices) == list(range(entry.documents + 1))
        for i in range(len(theirs)):
            tokens = np.asarray(theirs[i])
            assert tokens.dtype == np.uint16
            assert tokens.tolist() == ours[i].tolist()
            _, text = docs[by_shard[entry.path][i]]
            assert tokens.tolist() == [*sp.encode(text), meta["eos_id"]]
            seen += 1
    assert seen == len(docs)


# --------------------------------------------------------------------------------------------
# Doc-id sidecars and quarantine


def shard_doc_ids(spark, root, run_id=None) -> dict[str, list[str]]:
    """shard → its doc ids in .idx order, from shard_docs."""
    rows = spark.read.format("delta").load(f"{root}/shard_docs")
    if run_id:
        rows = rows.where(f"run_id = '{run_id}'")
    by_shard: dict[str, list[str]] = {}
    for r in rows.orderBy("shard", "doc_index").collect():
        assert r["doc_index"] == len(by_shard.setdefault(r["shard"], []))
        by_shard[r["shard"]].append(r["doc_id"])
    return by_shard


def assert_sidecars_match_shard_docs(spark, root, run_id=None):
    manifest_path = root / "shards" / "manifest.json"
    manifest = read_manifest(manifest_path)
    expected = shard_doc_ids(spark, root, run_id)
    assert {e.path for e in manifest.shards} == set(expected)
    for e in manifest.shards:
        assert read_doc_ids(shard_prefix(manifest_path, e)) == expected[e.path]


def test_docids_sidecars_equal_shard_docs(spark, lake):
    root, _ = lake
    assert_sidecars_match_shard_docs(spark, root)


@pytest.fixture
def lake_copy(lake, tmp_path):
    """The module's lake, copied: these tests add runs and must not change what the others
    read, and copying is much cheaper than training another tokenizer."""
    root, docs = lake
    shutil.copytree(root, tmp_path / "lake")
    return tmp_path / "lake", docs


def quarantined(row, doc_id, step, sample):
    return QuarantineEntry(doc_id=doc_id, shard=row["shard"], doc_index=row["doc_index"],
                           source=row["source"], reason="loss_spike", step=step,
                           train_run="run-a", sample=sample)


def test_quarantined_documents_leave_the_next_shards(spark, lake_copy, caplog):
    root, docs = lake_copy
    index = spark.read.format("delta").load(f"{root}/shard_docs") \
        .orderBy("shard", "doc_index").collect()
    named, by_position = index[0], index[-1]
    write_entries(root / "quarantine" / "run-a.jsonl", [
        quarantined(named, named["doc_id"], step=120, sample=4711),
        # A shard without a sidecar: the job finds the document through shard_docs.
        quarantined(by_position, None, step=121, sample=5003),
        # Not in the input (filtered out upstream since): ignored, counted in the log.
        quarantined(named, "cc-gone", step=121, sample=5004),
    ])
    caplog.set_level(logging.INFO)
    assert tokenize_shards.main(["--root", str(root), *SETS, "--run-id=tok-q"]) == 0

    dropped = {named["doc_id"], by_position["doc_id"]}
    new_run = shard_doc_ids(spark, root, "tok-q")
    assert {d for ids in new_run.values() for d in ids} == set(docs) - dropped
    assert_sidecars_match_shard_docs(spark, root, "tok-q")
    rejections = spark.read.format("delta").load(f"{root}/rejections") \
        .where("stage = 'tokenize_shards'").collect()
    assert {r["doc_id"]: (r["reason"], r["signals"]["train_run"], r["signals"]["step"],
                          r["run_id"]) for r in rejections} == {
        named["doc_id"]: ("quarantined", "run-a", "120", "tok-q"),
        by_position["doc_id"]: ("quarantined", "run-a", "121", "tok-q"),
    }
    run = spark.read.format("delta").load(f"{root}/runs").where("run_id = 'tok-q'").collect()[0]
    assert run["status"] == "succeeded"
    assert run["counts"]["quarantined"] == 2
    assert (run["rows_in"], run["rows_out"]) == (len(docs), len(docs) - 2)
    assert "quarantined=2 quarantine_unmatched=1" in caplog.text

    # Deleting the file puts the documents back and clears the stage's rejections: every run
    # applies the quarantine files as they are now (the path every lake with a rejections
    # table and no quarantine takes).
    (root / "quarantine" / "run-a.jsonl").unlink()
    assert tokenize_shards.main(["--root", str(root), *SETS, "--run-id=tok-r"]) == 0
    assert {d for ids in shard_doc_ids(spark, root, "tok-r").values() for d in ids} == set(docs)
    assert spark.read.format("delta").load(f"{root}/rejections") \
        .where("stage = 'tokenize_shards'").count() == 0


def test_malformed_quarantine_file_fails_the_job(lake_copy, capsys):
    root, _ = lake_copy
    (root / "quarantine").mkdir()
    good = QuarantineEntry(doc_id="cc-001", shard="r/cc/part-00000", doc_index=0, source="cc",
                           reason="loss_spike", step=1, train_run="run-a", sample=0)
    (root / "quarantine" / "bad.jsonl").write_text(good.to_json() + "\n{oops\n")
    assert tokenize_shards.main(["--root", str(root), *SETS]) == 2
    err = capsys.readouterr().err
    assert "malformed quarantine file" in err and "bad.jsonl:2: not JSON" in err

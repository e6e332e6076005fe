"""Dedup on real Spark and Delta: tiny frames with known duplicates, the sample crawl against
exact Jaccard, incremental against full, idempotent reruns, boilerplate lines, and the
signatures in lsh_index against datasketch."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
from conftest import TEST_SPARK_CONF

from tokenmill.jobs import dedup, ingest
from tokenmill.udfs import minhash

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]

WORDS = ("river harbour market winter morning village bridge mountain garden station letter "
         "window kitchen teacher doctor evening summer forest island castle valley meadow "
         "farmer baker painter sailor engine ladder basket candle mirror pillow blanket "
         "thunder lantern compass feather pebble orchard meadowlark copper silver").split()


def article(rng: random.Random, words: int = 220) -> str:
    sentences, current = [], []
    for i in range(words):
        current.append(rng.choice(WORDS))
        if len(current) >= 11 or i == words - 1:
            sentences.append(" ".join(current).capitalize() + ".")
            current = []
    return "\n".join(" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3))


def mutate(rng: random.Random, text: str, fraction: float) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), int(len(words) * fraction)):
        words[i] = rng.choice(WORDS).upper() + "x"
    return " ".join(words)


def write_docs(spark, root, rows) -> None:
    df = spark.createDataFrame(rows, "doc_id string, url string, text string")
    df.write.format("delta").mode("overwrite").save(f"{root}/docs")


def run(root, *args) -> int:
    return dedup.main(["--root", str(root), *args, *SETS])


def table(spark, root, name):
    return spark.read.format("delta").load(f"{root}/{name}")


def exact_j(a: str, b: str) -> float:
    return minhash.exact_jaccard(minhash.word_shingles(a), minhash.word_shingles(b))


@pytest.fixture(scope="module")
def tiny(spark, tmp_path_factory):
    rng = random.Random(3)
    base, other = article(rng), article(rng)
    rows = [
        ("d01", "http://a/1", base),
        ("d02", "http://a/2", base.upper().replace(".", "!")),  # same after normalisation
        ("d03", "http://a/3", mutate(rng, base, 0.01)),  # J ≈ 0.95
        ("d04", "http://a/4", mutate(rng, base, 0.12)),  # J ≈ 0.5: kept
        ("d05", "http://b/5", other),
        ("d06", "http://b/6", mutate(rng, other, 0.02)),
        ("d07", "http://c/7", "!!! ... ???"),  # no words at all
        ("d08", "http://c/8", article(rng)),
    ]
    root = tmp_path_factory.mktemp("tiny")
    write_docs(spark, root, rows)
    assert run(root, "--run-id", "tiny") == 0
    return root, {r[0]: r[2] for r in rows}


def test_known_duplicates_are_removed(spark, tiny):
    root, texts = tiny
    assert exact_j(texts["d01"], texts["d03"]) > 0.85
    assert exact_j(texts["d01"], texts["d04"]) < 0.7
    kept = {r["doc_id"] for r in table(spark, root, "deduped").collect()}
    assert kept == {"d01", "d04", "d05", "d07", "d08"}
    rejected = {r["doc_id"]: r for r in table(spark, root, "rejections").collect()}
    assert rejected["d02"]["reason"] == "exact_duplicate"
    assert rejected["d03"]["reason"] == "near_duplicate"
    assert rejected["d03"]["signals"]["representative"] == "d01"
    assert rejected["d06"]["signals"]["representative"] == "d05"
    clusters = {r["doc_id"]: r for r in table(spark, root, "dup_clusters").collect()}
    assert clusters["d01"]["kind"] == "representative" and clusters["d01"]["cluster_size"] == 3
    assert clusters["d02"]["kind"] == "exact" and clusters["d03"]["kind"] == "near"
    run_row = table(spark, root, "runs").where("run_id = 'tiny'").collect()[0]
    assert run_row["counts"]["exact_duplicate"] == 1
    assert run_row["counts"]["near_duplicate"] == 2
    assert run_row["rows_in"] == 8 and run_row["rows_out"] == 5


def test_lsh_index_signatures_equal_datasketch(spark, tiny):
    from datasketch import MinHash

    root, texts = tiny
    for r in table(spark, root, "lsh_index").collect():
        mh = MinHash(num_perm=128, seed=1, hashfunc=minhash.shingle_hash32)
        for s in minhash.word_shingles(texts[r["doc_id"]], 5):
            mh.update(s.encode("utf-8"))
        assert np.array_equal(np.asarray(r["signature"], dtype=np.int32).view(np.uint32),
                              mh.hashvalues)
        assert len(r["band_hashes"]) in (0, 20)


def test_full_rerun_gives_the_same_tables(spark, tiny):
    root, _ = tiny
    before = sorted(tuple(r) for r in table(spark, root, "deduped").collect())
    clusters = sorted(tuple(r) for r in table(spark, root, "dup_clusters").drop("run_id").collect())
    assert run(root, "--run-id", "tiny-again") == 0
    assert sorted(tuple(r) for r in table(spark, root, "deduped").collect()) == before
    assert sorted(
        tuple(r) for r in table(spark, root, "dup_clusters").drop("run_id").collect()
    ) == clusters
    assert table(spark, root, "rejections").count() == 3
    # A full rebuild with a stricter threshold replaces the stage's earlier decisions.
    assert run(root, "--set", "dedup.threshold=0.99") == 0
    reasons = {r["doc_id"]: r["reason"] for r in table(spark, root, "rejections").collect()}
    assert reasons == {"d02": "exact_duplicate"}
    assert {"d03", "d06"} <= {r["doc_id"] for r in table(spark, root, "deduped").collect()}


def test_boilerplate_lines_are_removed(spark, tmp_path):
    rng = random.Random(5)
    banner = "We use cookies to improve your experience on this site."
    rows = [(f"b{i:03d}", f"http://s/{i}", f"{article(rng, 60)}\n{banner}") for i in range(8)]
    rows.append(("b999", "http://s/only", banner))
    write_docs(spark, tmp_path, rows)
    assert run(tmp_path, "--set", "dedup.boilerplate_min_docs=5") == 0
    out = {r["doc_id"]: r for r in table(spark, tmp_path, "deduped").collect()}
    assert len(out) == 8
    assert all(banner not in r["text"] and r["boilerplate_lines"] == 1 for r in out.values())
    assert out["b000"]["text"] == rows[0][2].split("\n" + banner)[0]
    reasons = {r["doc_id"]: r["reason"] for r in table(spark, tmp_path, "rejections").collect()}
    assert reasons == {"b999": "boilerplate_only"}


@pytest.fixture(scope="module")
def crawl_lake(spark, sample_crawl, tmp_path_factory):
    crawl_dir, _ = sample_crawl
    root = tmp_path_factory.mktemp("crawl-lake")
    assert ingest.main(["--root", str(root), "--input", f"{crawl_dir}/*.warc.gz", *SETS]) == 0
    return root


def test_sample_crawl_against_exact_jaccard(spark, sample_crawl, crawl_lake, tmp_path):
    crawl_dir, _ = sample_crawl
    root = crawl_lake
    assert run(root, "--run-id", "crawl") == 0
    docs = {r["doc_id"]: r["text"] for r in table(spark, root, "docs").collect()}
    clusters = {r["doc_id"]: r["cluster_id"] for r in table(spark, root, "dup_clusters").collect()}
    kept = {r["doc_id"] for r in table(spark, root, "deduped").collect()}
    labels = [json.loads(x) for x in (crawl_dir / "labels.jsonl").read_text().splitlines()]
    for lab in labels:  # every planted exact duplicate is gone, its original kept
        if lab["kind"] == "exact_duplicate":
            a, b = lab["doc_id"], lab["duplicate_of"]
            assert clusters[a] == clusters[b] and len({a, b} & kept) == 1
    # Pairs against exact Jaccard: precision and recall of "same cluster" at J >= 0.8.
    shingles = {d: set(minhash.word_shingles(t)) for d, t in docs.items()}
    tp = fp = fn = 0
    for a, b in itertools.combinations(sorted(docs), 2):
        j = minhash.exact_jaccard(shingles[a], shingles[b])
        same = a in clusters and clusters.get(a) == clusters.get(b)
        if j >= 0.8:
            tp += same
            fn += not same
        elif same:
            fp += 1
            assert j >= 0.6, (a, b, j)  # a wrong merge is never far below the threshold
    precision, recall = tp / max(1, tp + fp), tp / max(1, tp + fn)
    print(f"sample crawl pairs: tp={tp} fp={fp} fn={fn} precision={precision:.3f} "
          f"recall={recall:.3f}")
    assert tp >= 10 and recall >= 0.95 and precision >= 0.9


def test_incremental_equals_full(spark, crawl_lake, tmp_path):
    docs = table(spark, crawl_lake, "docs").select("doc_id", "url", "text").collect()
    rows = [tuple(r) for r in docs]
    first = [r for r in rows if int(r[0][:2], 16) % 3 != 0]
    second = [r for r in rows if int(r[0][:2], 16) % 3 == 0]
    off = ["--set", "dedup.boilerplate=false"]
    full_root, inc_root = tmp_path / "full", tmp_path / "inc"
    write_docs(spark, full_root, rows)
    assert run(full_root, *off) == 0
    write_docs(spark, inc_root, first)
    assert run(inc_root, *off) == 0
    old_kept = {r["doc_id"] for r in table(spark, inc_root, "deduped").collect()}
    write_docs(spark, inc_root, rows)  # the second batch arrives
    assert run(inc_root, *off, "--incremental", "--run-id", "inc") == 0
    run_row = table(spark, inc_root, "runs").where("run_id = 'inc'").collect()[0]
    assert run_row["rows_in"] == len(second)  # only new documents were processed

    full_kept = {r["doc_id"] for r in table(spark, full_root, "deduped").collect()}
    inc_kept = {r["doc_id"] for r in table(spark, inc_root, "deduped").collect()}
    assert old_kept <= inc_kept  # old documents are never dropped
    assert len(inc_kept) == len(full_kept)
    full_clusters = {}
    for r in table(spark, full_root, "dup_clusters").collect():
        full_clusters.setdefault(r["cluster_id"], set()).add(r["doc_id"])
    for members in full_clusters.values():  # one survivor per cluster, either way
        assert len(members & inc_kept) == 1, members
    # Rerunning the incremental job with nothing new changes nothing.
    version = table(spark, inc_root, "deduped").count()
    assert run(inc_root, *off, "--incremental") == 0
    assert table(spark, inc_root, "deduped").count() == version

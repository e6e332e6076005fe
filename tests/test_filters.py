"""The filter stages on real Spark and Delta: langid → urlfilter → train_lm → quality on the
sample crawl against its labels, re-thresholding without recomputing signals, idempotent reruns,
perplexity buckets, the toxicity rules and the errors a user sees."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from conftest import REPO, TEST_SPARK_CONF, VENV_BIN
from pyspark.sql import functions as F

from tokenmill.jobs import ingest, langid, quality, train_lm, urlfilter
from tokenmill.jobs.runtime import delta_version
from tokenmill.jobs.sample_crawl import reference_corpus
from tokenmill.udfs.quality import QUALITY_RULES

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]
LM_SETS = ["--set=perplexity.reference_docs=300"]


def run(job, root, *args) -> int:
    return job.main(["--root", str(root), *args, *SETS])


def table(spark, root, name):
    return spark.read.format("delta").load(f"{root}/{name}")


def last_run(spark, root, job):
    rows = table(spark, root, "runs").where(f"job = '{job}'").orderBy("started_at").collect()
    return rows[-1]


def outcomes(spark, root) -> dict[str, str]:
    """doc_id → "kept" or "<stage>:<reason>" after the three filter stages."""
    got = {
        r["doc_id"]: f"{r['stage']}:{r['reason']}"
        for r in table(spark, root, "rejections")
        .where("stage in ('langid', 'urlfilter', 'quality')").collect()
    }
    for r in table(spark, root, "quality").select("doc_id").collect():
        got[r["doc_id"]] = "kept"
    return got


@pytest.fixture(scope="module")
def lake(spark, sample_crawl, tmp_path_factory):
    crawl, _ = sample_crawl
    root = tmp_path_factory.mktemp("filters-lake")
    assert run(ingest, root, "--input", str(crawl / "*.warc.gz")) == 0
    assert run(langid, root) == 0
    assert run(urlfilter, root) == 0
    assert run(train_lm, root, *LM_SETS) == 0
    assert run(quality, root) == 0
    return root


@pytest.fixture(scope="module")
def labels(sample_crawl):
    crawl, _ = sample_crawl
    lines = (crawl / "labels.jsonl").read_text("utf-8").splitlines()
    return {lab["doc_id"]: lab for lab in map(json.loads, lines) if lab["expected_filter"]}


def test_every_document_meets_its_label(spark, lake, labels):
    got = outcomes(spark, lake)
    wrong = []
    for doc_id, lab in labels.items():
        expected, outcome = lab["expected_filter"], got.get(doc_id)
        if expected == "dropped":
            ok = outcome not in (None, "kept")
        else:
            ok = outcome == expected
        if not ok:
            wrong.append((lab["kind"], lab["lang"], expected, outcome))
    assert not wrong
    # The planted junk is gone, the articles (and repaired mojibake) are all there.
    assert sum(1 for v in got.values() if v == "kept") == sum(
        1 for lab in labels.values() if lab["expected_filter"] == "kept"
    )


def test_runs_count_each_reason_and_the_rejections_agree(spark, lake):
    rej = table(spark, lake, "rejections")
    for job in ("langid", "urlfilter", "quality"):
        run_row = last_run(spark, lake, job)
        assert run_row["status"] == "succeeded"
        per_reason = {r["reason"]: r["count"] for r in
                      rej.where(f"stage = '{job}'").groupBy("reason").count().collect()}
        counted = {k: v for k, v in run_row["counts"].items() if not k.startswith("signals_")}
        assert counted == per_reason
        assert run_row["rows_in"] == run_row["rows_out"] + sum(per_reason.values())
        out = table(spark, lake, job)
        assert out.count() == run_row["rows_out"]
    # Each stage reads the previous one.
    assert last_run(spark, lake, "urlfilter")["input_table"] == "langid"
    assert last_run(spark, lake, "quality")["input_table"] == "urlfilter"


def test_signals_are_columns_and_rejections_carry_them(spark, lake):
    q = table(spark, lake, "quality")
    for col in ("lang", "lang_score", "url_soft_words", "words", "dup_line_fraction",
                "c4_sentences", "line_punct_ratio", "perplexity", "ppl_bucket",
                "toxic_word_ratio"):
        assert col in q.columns
    blocked = table(spark, lake, "rejections").where("reason = 'blocked_domain'").collect()
    assert blocked and all(r["signals"]["url_match"] == "casino-bonus.example" for r in blocked)
    low = table(spark, lake, "rejections").where("reason = 'lang_low_score'").collect()
    assert all(float(r["signals"]["lang_score"]) < 0.65 for r in low)


def test_mojibake_is_repaired_and_text_rewritten(spark, lake, labels):
    mojibake = [d for d, lab in labels.items() if lab["kind"] == "mojibake"]
    rows = table(spark, lake, "quality").where(F.col("doc_id").isin(mojibake)).collect()
    assert len(rows) == len(mojibake) == 3
    for r in rows:
        assert r["ftfy_fixed"] == 1
        assert "café" in r["text"] and "Ã©" not in r["text"]
        assert r["text_length"] == len(r["text"])


def test_perplexity_buckets_follow_the_stored_cutoffs(spark, lake):
    cut = table(spark, lake, "perplexity_cutoffs").collect()
    assert [c["lang"] for c in cut] == ["en"]
    head, middle = cut[0]["head_max"], cut[0]["middle_max"]
    assert head <= middle
    rows = table(spark, lake, "quality").select("perplexity", "ppl_bucket").collect()
    for r in rows:
        expected = "head" if r[0] <= head else "middle" if r[0] <= middle else "tail"
        assert r[1] == expected
    buckets = [r[1] for r in rows]
    assert 0.2 < buckets.count("head") / len(rows) < 0.45


def test_rethreshold_reruns_only_the_predicate(spark, lake):
    sig_version = delta_version(spark, f"{lake}/quality_signals")
    before = table(spark, lake, "quality").count()
    assert run(quality, lake, "--set", "quality.gopher_min_words=400",
               "--set", "perplexity.keep_buckets=[head, middle]") == 0
    run_row = last_run(spark, lake, "quality")
    assert run_row["counts"]["signals_computed"] == 0
    assert run_row["counts"]["signals_reused"] == run_row["rows_in"]
    assert delta_version(spark, f"{lake}/quality_signals") == sig_version
    after = table(spark, lake, "quality")
    assert after.count() < before
    assert after.where("words < 400").count() == 0
    assert after.where("ppl_bucket = 'tail'").count() == 0
    assert run_row["counts"]["gopher_min_words"] > 0
    assert run_row["counts"]["perplexity_bucket"] > 0
    # Back to the defaults: the same table as the first run, rejections replaced, not added.
    assert run(quality, lake) == 0
    assert table(spark, lake, "quality").count() == before
    assert table(spark, lake, "rejections").where(
        "stage = 'quality' AND reason IN ('gopher_min_words', 'perplexity_bucket')").count() == 0


def test_rerun_is_idempotent(spark, lake):
    kept = sorted(r[0] for r in table(spark, lake, "langid").select("doc_id").collect())
    rejected = table(spark, lake, "rejections").where("stage = 'langid'").count()
    sig_version = delta_version(spark, f"{lake}/langid_signals")
    assert run(langid, lake) == 0
    assert sorted(r[0] for r in table(spark, lake, "langid").select("doc_id").collect()) == kept
    assert table(spark, lake, "rejections").where("stage = 'langid'").count() == rejected
    assert delta_version(spark, f"{lake}/langid_signals") == sig_version
    assert last_run(spark, lake, "langid")["counts"]["signals_computed"] == 0


def test_target_languages_from_config(spark, lake):
    assert run(langid, lake, "--set", "langid.languages=[en, de]") == 0
    langs = {r[0] for r in table(spark, lake, "langid").select("lang").distinct().collect()}
    assert langs == {"en", "de"}
    assert last_run(spark, lake, "langid")["counts"]["signals_computed"] == 0
    assert run(langid, lake) == 0


# ------------------------------------------------------------------ inline documents


def _article(seed: int) -> str:
    return reference_corpus("en", 1, seed)[0]


def write_docs(spark, root, rows) -> None:
    df = spark.createDataFrame(rows, "doc_id string, url string, text string")
    df.write.format("delta").mode("overwrite").save(f"{root}/docs")


def test_toxicity_words_and_a_classifier_hook(spark, tmp_path):
    import fasttext

    rng = random.Random(3)
    clean = _article(101)
    sweary = _article(102).split(" ")
    for i in rng.sample(range(len(sweary)), len(sweary) // 30):
        sweary[i] = "bullshit"
    flagged = _article(103)
    write_docs(spark, tmp_path, [
        ("clean", "https://a.example/1", clean),
        ("sweary", "https://a.example/2", " ".join(sweary)),
        ("flagged", "https://a.example/3", flagged + "\nzorblax quibbit zorblax quibbit."),
    ])
    # A tiny fastText classifier trained here: `zorblax`/`quibbit` mark the toxic class.
    vocab = ["zorblax", "quibbit", "garden", "river", "market", "letter", "window", "summer"]
    train = tmp_path / "train.txt"
    lines = []
    for i in range(200):
        if i % 2:
            lines.append("__label__toxic " + " ".join(rng.choices(vocab[:2], k=6)))
        else:
            lines.append("__label__clean " + " ".join(rng.choices(vocab[2:], k=6)))
    train.write_text("\n".join(lines) + "\n")
    vec = tmp_path / "init.vec"
    dim = 8
    vec.write_text(f"{len(vocab) + 3} {dim}\n" + "".join(
        f"{w} " + " ".join(f"{rng.uniform(-0.1, 0.1):.4f}" for _ in range(dim)) + "\n"
        for w in [*vocab, "</s>", "__label__toxic", "__label__clean"]
    ))
    model = fasttext.train_supervised(str(train), dim=dim, epoch=25, lr=0.5, thread=1,
                                      pretrainedVectors=str(vec), minCount=1)
    model_path = tmp_path / "tox.bin"
    model.save_model(str(model_path))

    assert run(quality, tmp_path, "--set", "quality.gopher_min_words=1",
               "--set", f"toxicity.classifier_path={model_path}",
               "--set", "toxicity.classifier_threshold=0.05") == 0
    reasons = {r["doc_id"]: r["reason"] for r in
               table(spark, tmp_path, "rejections").where("stage = 'quality'").collect()}
    assert reasons.get("sweary") == "toxic_words"
    assert reasons.get("flagged") == "toxic_classifier"
    assert "clean" not in reasons
    kept = table(spark, tmp_path, "quality").collect()
    assert [r["doc_id"] for r in kept] == ["clean"]
    assert kept[0]["toxic_words"] == 0 and kept[0]["toxic_score"] < 0.05
    # No language column in `docs`: perplexity is null, the rules still apply.
    assert kept[0]["perplexity"] is None and kept[0]["lang"] is None


def test_each_rule_reason_can_come_out_of_the_job(spark, tmp_path):
    """Three inline pages that break one rule family each, through the Spark predicate: the
    same reasons as udfs.quality.first_failing_rule gives in Python."""
    from tokenmill.udfs.quality import first_failing_rule, quality_signals, thresholds_default

    good = _article(7)
    pages = {
        "short": "Only a few words here, and that is the whole page of text.",
        "lorem": good + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit, sed do.",
        "good": good,
    }
    write_docs(spark, tmp_path, [(k, f"https://b.example/{k}", v) for k, v in pages.items()])
    assert run(quality, tmp_path) == 0
    reasons = {r["doc_id"]: r["reason"] for r in
               table(spark, tmp_path, "rejections").where("stage = 'quality'").collect()}
    for doc_id, text in pages.items():
        _, sig = quality_signals(text)
        assert reasons.get(doc_id) == first_failing_rule(sig, thresholds_default())
    assert reasons["short"] == "gopher_min_words"
    assert reasons["lorem"] == "c4_lorem_ipsum"
    assert "good" not in reasons


def test_rule_table_and_config_name_the_same_thresholds():
    from tokenmill.jobs.config import QualityConfig
    from tokenmill.udfs.quality import thresholds_default

    cfg = QualityConfig().thresholds()
    assert set(thresholds_default()) == set(cfg)
    assert thresholds_default() == cfg
    assert {r.signal for r in QUALITY_RULES} <= {n for n, _ in quality.QUALITY_SIGNALS}


def test_errors_are_clear(spark, tmp_path, capsys):
    assert run(langid, tmp_path) == 2
    assert "no input table" in capsys.readouterr().err
    write_docs(spark, tmp_path, [("a", "https://c.example/", "Some text.")])
    assert run(urlfilter, tmp_path, "--set",
               f"urlfilter.domains_files=[{tmp_path / 'missing.txt'}]") == 2
    assert "missing.txt" in capsys.readouterr().err
    assert run(langid, tmp_path, "--set", "langid.min_score=2") == 2
    assert "langid.min_score: must lie in [0, 1]" in capsys.readouterr().err


def test_train_lm_is_deterministic_and_needs_kenlm(spark, tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        assert run(train_lm, root, *LM_SETS) == 0
    meta_a = json.loads((a / "models/lm/en/model.json").read_text())
    meta_b = json.loads((b / "models/lm/en/model.json").read_text())
    assert meta_a["fingerprint"] == meta_b["fingerprint"]
    assert (a / "models/lm/en" / meta_a["kenlm"]).read_bytes() == (
        b / "models/lm/en" / meta_b["kenlm"]).read_bytes()
    monkeypatch.setenv(train_lm.KENLM_BIN_ENV, str(tmp_path / "nowhere"))
    assert run(train_lm, tmp_path / "c", *LM_SETS) == 2


def test_spark_submit_runs_a_filter_stage_as_documented(spark, lake, tmp_path):
    """The README's command line, a real spark-submit, on the lake of this module."""
    out = subprocess.run(
        [str(VENV_BIN / "spark-submit"), str(REPO / "jobs" / "urlfilter.py"),
         "--root", str(lake), *SETS],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "urlfilter succeeded" in out.stdout
    # Nothing to recompute: the summary counts reused signals only (zero counts are omitted).
    assert "signals_reused=" in out.stdout and "signals_computed=" not in out.stdout


def test_empty_input_gives_empty_tables(spark, tmp_path):
    write_docs(spark, tmp_path, [])
    assert run(langid, tmp_path) == 0
    assert run(quality, tmp_path, "--input-table", "langid") == 0
    assert table(spark, tmp_path, "langid").count() == 0
    assert table(spark, tmp_path, "quality").count() == 0
    row = last_run(spark, tmp_path, "quality")
    assert row["status"] == "succeeded" and row["rows_in"] == 0 and row["rows_out"] == 0

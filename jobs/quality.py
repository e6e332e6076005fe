"""Quality: text repair, Gopher quality and repetition, C4 and FineWeb rules, cc_net
perplexity and toxicity — every statistic a column, thresholds from config.

    spark-submit jobs/quality.py --root lake [--set quality.gopher_min_words=100]

Reads `urlfilter` (else `langid`, `docs`, or --input-table) and writes `quality`: the kept rows
with the text as C4's line cleaning left it (text, text_length and text_hash rewritten) and
every signal of udfs/quality.py, perplexity (+ ppl_bucket) and toxicity. Per document, in one
Python pass: Unicode NFC, control characters and whitespace, mojibake repaired with ftfy →
Gopher repetition and quality signals → C4 line cleaning and document signals → FineWeb
signals → perplexity with the language's model from jobs/train_lm.py (none: null) → toxic word
ratio (and a fastText classifier's score when configured).

A document is dropped with the reason of the first rule it fails, in udfs/quality.py's order,
then `perplexity_bucket`, `max_perplexity`, `toxic_words`, `toxic_classifier`. Perplexity
buckets (head / middle / tail) come from per-language percentiles of this run's documents,
stored in `perplexity_cutoffs`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from tokenmill.jobs.filtering import (
    FilterStage,
    Rule,
    run_filter_stage,
    signals_key,
    threshold_rules,
)
from tokenmill.jobs.runtime import (
    JobContext,
    JobError,
    glob_paths,
    job_parser,
    local_copy,
    read_small_text,
    run_job,
    ship_file,
)
from tokenmill.jobs.train_lm import MODELS_DIR
from tokenmill.schemas.tables import (
    DOCS,
    LANGID_NAME,
    PERPLEXITY_CUTOFFS,
    QUALITY_DERIVED,
    QUALITY_NAME,
    QUALITY_REWRITES,
    QUALITY_SIGNALS,
    URLFILTER_NAME,
)

JOB = QUALITY_NAME
STAGE = FilterStage(
    name=QUALITY_NAME,
    inputs=(URLFILTER_NAME, LANGID_NAME, DOCS.name),
    signals=QUALITY_SIGNALS,
    rewrites=QUALITY_REWRITES,
    derived=QUALITY_DERIVED,
    description="Documents that pass the quality rules; text after C4 line cleaning.",
)


# ----------------------------------------------------------------- worker side (cached per process)


@lru_cache(maxsize=4)
def toxic_words(paths: tuple[str, ...], include_default: bool) -> frozenset[str]:
    from tokenmill.udfs.toxicity import load_word_list

    return load_word_list([local_copy(p) for p in paths], include_default=include_default)


@lru_cache(maxsize=8)
def perplexity_scorer(sp_model: str, kenlm: str) -> Any:
    from tokenmill.udfs.perplexity import PerplexityScorer

    return PerplexityScorer.load(local_copy(sp_model), local_copy(kenlm))


@lru_cache(maxsize=2)
def toxicity_classifier(path: str) -> Any:
    from tokenmill.udfs.toxicity import FastTextClassifier

    return FastTextClassifier(local_copy(path))


def make_scorer(params: dict[str, Any]) -> Any:
    """The per-batch signal function; `params` holds only plain values (shipped paths), and
    the models behind them are loaded once per Python worker by the cached loaders above."""

    def score(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # Imported by name so that the caches live in the worker's module, not in a pickled
        # copy of this closure.
        from tokenmill.jobs import quality as q
        from tokenmill.udfs.quality import quality_signals
        from tokenmill.udfs.text import text_hash
        from tokenmill.udfs.toxicity import toxic_word_ratio

        words = q.toxic_words(tuple(params["toxic_lists"]), params["toxic_default"])
        out: dict[str, list[Any]] = {n: [] for n, _ in (*QUALITY_REWRITES, *QUALITY_SIGNALS)}
        signal_names = [n for n, _ in QUALITY_SIGNALS]
        for text in cols["text"]:
            clean, sig = quality_signals(text or "", params["c4"])
            sig["toxic_words"], sig["toxic_word_ratio"] = toxic_word_ratio(clean, words)
            sig["perplexity"] = None
            sig["toxic_score"] = None
            out["text"].append(clean)
            out["text_length"].append(len(clean))
            out["text_hash"].append(text_hash(clean))
            for n in signal_names:
                out[n].append(sig.get(n))
        by_lang: dict[str, list[int]] = {}
        for i, lang in enumerate(cols["lang"]):
            if lang in params["lms"]:
                by_lang.setdefault(lang, []).append(i)
        for lang, rows in by_lang.items():
            sp_model, kenlm = params["lms"][lang]
            ppl = q.perplexity_scorer(sp_model, kenlm).perplexities(
                [out["text"][i] for i in rows]
            )
            for i, v in zip(rows, ppl, strict=True):
                out["perplexity"][i] = v
        if params["classifier"]:
            clf = q.toxicity_classifier(params["classifier"])
            out["toxic_score"] = clf.scores(out["text"], params["classifier_label"])
        return out

    return score


# ----------------------------------------------------------------- driver side


def language_models(ctx: JobContext) -> dict[str, dict[str, Any]]:
    """The committed models (model.json present) under <root>/models/lm, by language."""
    found = {}
    for meta_path in glob_paths(ctx.spark, f"{ctx.path(MODELS_DIR)}/*/model.json"):
        meta = json.loads(read_small_text(ctx.spark, meta_path))
        base = meta_path.rsplit("/", 1)[0]
        meta["sp_model_path"] = f"{base}/{meta['sp_model']}"
        meta["kenlm_path"] = f"{base}/{meta['kenlm']}"
        found[meta["lang"]] = meta
    return found


def bucket_derivation(ctx: JobContext, models: dict[str, dict[str, Any]]) -> Any:
    """cc_net's buckets: per language, documents up to the head percentile's perplexity are
    `head`, up to the tail percentile's `middle`, the rest `tail`. The cutoffs are computed from
    the documents of this run and stored in `perplexity_cutoffs`."""
    from pyspark.sql import functions as F

    cfg = ctx.config.perplexity

    def derive(joined: Any) -> Any:
        q = F.percentile_approx("perplexity", [cfg.head_percentile, cfg.tail_percentile], 10_000)
        rows = (
            joined.where(F.col("perplexity").isNotNull())
            .groupBy("lang").agg(q.alias("q"), F.count("*").alias("docs"))
            .collect()
        )
        cutoffs = [
            {
                "lang": r["lang"],
                "head_max": float(r["q"][0]),
                "middle_max": float(r["q"][1]),
                "docs": int(r["docs"]),
                "model_fingerprint": models.get(r["lang"], {}).get("fingerprint"),
                "run_id": ctx.run_id,
            }
            for r in rows
            if r["lang"] is not None
        ]
        ctx.overwrite(
            PERPLEXITY_CUTOFFS, ctx.spark.createDataFrame(cutoffs, PERPLEXITY_CUTOFFS.schema)
        )
        for c in cutoffs:
            ctx.notes.append(f"ppl[{c['lang']}]<={c['head_max']:.1f}/{c['middle_max']:.1f}")
        cut = ctx.spark.createDataFrame(
            [(c["lang"], c["head_max"], c["middle_max"]) for c in cutoffs],
            "lang string, _head_max double, _middle_max double",
        )
        ppl = F.col("perplexity")
        bucket = (
            F.when(ppl.isNull() | F.col("_head_max").isNull(), F.lit(None))
            .when(ppl <= F.col("_head_max"), F.lit("head"))
            .when(ppl <= F.col("_middle_max"), F.lit("middle"))
            .otherwise(F.lit("tail"))
        )
        return (
            joined.join(F.broadcast(cut), "lang", "left")
            .withColumn("ppl_bucket", bucket.cast("string"))
            .drop("_head_max", "_middle_max")
        )

    return derive


def quality_rules(ctx: JobContext) -> list[Rule]:
    from pyspark.sql import functions as F

    from tokenmill.udfs.quality import QUALITY_RULES

    thresholds = ctx.config.quality.thresholds()
    rules = threshold_rules(
        (r.reason, r.signal, r.op, thresholds[r.param]) for r in QUALITY_RULES
    )
    ppl, tox = ctx.config.perplexity, ctx.config.toxicity
    if set(ppl.keep_buckets) != {"head", "middle", "tail"}:
        rules.append((
            "perplexity_bucket",
            F.col("ppl_bucket").isNotNull() & ~F.col("ppl_bucket").isin(list(ppl.keep_buckets)),
        ))
    rules += threshold_rules([
        ("max_perplexity", "perplexity", "gt", ppl.max_perplexity),
        ("toxic_words", "toxic_word_ratio", "gt", tox.max_word_ratio),
        ("toxic_classifier", "toxic_score", "gt",
         tox.classifier_threshold if tox.classifier_path else None),
    ])
    return rules


def quality(ctx: JobContext) -> None:
    from tokenmill.udfs.quality import QUALITY_RULES

    missing = [r.param for r in QUALITY_RULES if r.param not in ctx.config.quality.thresholds()]
    if missing:  # the rule table and the config must name the same thresholds
        raise JobError(f"quality config lacks threshold(s) {', '.join(missing)}")
    spark = ctx.spark
    ppl, tox = ctx.config.perplexity, ctx.config.toxicity
    models = language_models(ctx) if ppl.enabled else {}
    if ppl.enabled and not models:
        ctx.notes.append("perplexity=off(no models: run jobs/train_lm.py)")
    lms = {
        lang: (ship_file(spark, m["sp_model_path"]), ship_file(spark, m["kenlm_path"]))
        for lang, m in models.items()
    }
    params = {
        "c4": ctx.config.quality.c4_params(),
        "toxic_lists": [ship_file(spark, p) for p in tox.word_lists],
        "toxic_default": tox.use_default_list,
        "lms": lms,
        "classifier": ship_file(spark, tox.classifier_path) if tox.classifier_path else None,
        "classifier_label": tox.classifier_label,
    }
    from tokenmill.udfs.toxicity import load_word_list

    try:
        words = load_word_list(list(tox.word_lists), include_default=tox.use_default_list)
    except OSError as e:
        raise JobError(f"toxicity.word_lists: {e}") from None
    key = signals_key(
        c4=params["c4"],
        toxic_words=sorted(words),
        lms={lang: m["fingerprint"] for lang, m in models.items()},
        classifier=(tox.classifier_path, tox.classifier_label),
    )
    run_filter_stage(
        ctx,
        STAGE,
        key=key,
        compute_columns=("text", "lang"),
        optional=("lang",),
        compute=make_scorer(params),
        rules=quality_rules(ctx),
        derive=bucket_derivation(ctx, models),
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Compute quality signals (Gopher, C4, FineWeb, perplexity, "
                             "toxicity) and drop what fails the configured rules.")
    parser.add_argument(
        "--input-table", help="table to read (default: urlfilter, else langid, else docs)"
    )
    return run_job(JOB, parser, quality, argv)


if __name__ == "__main__":
    raise SystemExit(main())

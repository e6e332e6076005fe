"""PII masking: Presidio (offline NLP configuration) behind a cheap prefilter; nothing dropped.

    spark-submit jobs/pii.py --root lake [--set pii.mode=patterns]

Reads the newest cleaned table (`deduped`, else `quality`, `urlfilter`, `langid`, `docs`, or
--input-table) and writes `clean`: the same rows with e-mail addresses, phone numbers, credit
cards (Luhn-checked), IP addresses, IBANs, US social security numbers and, in `ner` mode,
person names replaced by a mask per type (`<EMAIL>`, `<PHONE>`, …; pii.replacements). The
masked text, text_length and text_hash replace the input's; `pii_<type>` columns count the
masks per document, and `runs.counts` the totals per type. Masked values are never logged.

Only documents the prefilter flags go to Presidio (the masks are identical to analysing every
document: tests/test_pii.py). NER runs on pii.ner_languages; other languages are masked with
patterns only. Like the filter stages, masks are computed once per document and kept in
`pii_signals`, so a rerun on the same input recomputes nothing.
"""

from __future__ import annotations

from typing import Any

from tokenmill.jobs.dedup import INPUT_CANDIDATES as DEDUP_INPUTS
from tokenmill.jobs.filtering import FilterStage, run_filter_stage, signals_key
from tokenmill.jobs.runtime import JobContext, job_parser, run_job
from tokenmill.schemas.tables import CLEAN_NAME, DEDUPED_NAME, PII_SIGNALS, QUALITY_REWRITES

JOB = "pii"
STAGE = FilterStage(
    name=JOB,
    inputs=(DEDUPED_NAME, *DEDUP_INPUTS),
    signals=PII_SIGNALS,
    rewrites=QUALITY_REWRITES,
    output=CLEAN_NAME,
    description="Documents with personal data masked, ready for the tokenizer.",
)


def pii_params(cfg: Any, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "entities": tuple(cfg.entities),
        "score_threshold": cfg.score_threshold,
        "type_thresholds": dict(cfg.type_thresholds),
        "replacements": dict(cfg.replacements),
    }


def make_masker(cfg: Any) -> Any:
    ner = pii_params(cfg, cfg.mode)
    patterns = pii_params(cfg, "patterns")
    ner_languages = set(cfg.ner_languages)
    prefilter = cfg.prefilter

    def mask(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
        from tokenmill.udfs.pii import PiiParams, mask_pii
        from tokenmill.udfs.text import text_hash

        texts = [t or "" for t in cols["text"]]
        # Documents without a language (a source that skipped langid) get the configured mode.
        use_ner = [lang is None or lang in ner_languages for lang in cols["lang"]]
        results: list[Any] = [None] * len(texts)
        for wanted, params in ((True, ner), (False, patterns)):
            rows = [i for i, flag in enumerate(use_ner) if flag == wanted]
            if rows:
                masked = mask_pii([texts[i] for i in rows], PiiParams(**params),
                                  prefilter=prefilter)
                for i, r in zip(rows, masked, strict=True):
                    results[i] = r
        out: dict[str, list[Any]] = {n: [] for n, _ in (*QUALITY_REWRITES, *PII_SIGNALS)}
        for text, counts in results:
            out["text"].append(text)
            out["text_length"].append(len(text))
            out["text_hash"].append(text_hash(text))
            for name, _ in PII_SIGNALS[:-1]:
                out[name].append(counts.get(name.removeprefix("pii_").upper(), 0))
            out["pii_masked"].append(sum(counts.values()))
        return out

    return mask


def pii(ctx: JobContext) -> None:
    from pyspark.sql import functions as F

    cfg = ctx.config.pii
    # Modes, types, thresholds and replacements all change the masked text: they are signal
    # inputs, not a predicate (nothing is dropped here). The prefilter is not: same masks.
    key = signals_key(
        mode=cfg.mode, entities=sorted(cfg.entities), score=cfg.score_threshold,
        types=cfg.type_thresholds, replacements=cfg.replacements,
        ner_languages=sorted(cfg.ner_languages),
    )
    run_filter_stage(
        ctx,
        STAGE,
        key=key,
        compute_columns=("text", "lang"),
        optional=("lang",),
        compute=make_masker(cfg),
        rules=[],
    )
    with ctx.step("count masks per type"):
        clean = ctx.spark.read.format("delta").load(ctx.path(CLEAN_NAME))
        totals = clean.agg(*[F.sum(n).alias(n) for n, _ in PII_SIGNALS]).collect()[0]
        for name, _ in PII_SIGNALS:
            ctx.counts[name.removeprefix("pii_")] = int(totals[name] or 0)
        ctx.counts["docs_masked"] = clean.where("pii_masked > 0").count()


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Mask personal data (Presidio) in the newest cleaned table.")
    parser.add_argument(
        "--input-table",
        help=f"table to read (default: the first that exists of {DEDUPED_NAME}, "
             f"{', '.join(DEDUP_INPUTS)})",
    )
    return run_job(JOB, parser, pii, argv)


if __name__ == "__main__":
    raise SystemExit(main())

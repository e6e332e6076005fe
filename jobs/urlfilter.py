"""URL filter: domain, host and full-URL blocklists, banned words and subwords in URLs, and
soft-banned words counted (RefinedWeb's URL filtering, Penedo et al. 2023, G.1).

    spark-submit jobs/urlfilter.py --root lake [--set urlfilter.ut1_dirs='[/data/ut1]']

Reads `langid` (or `docs`, or --input-table), writes `urlfilter` (kept rows + url_blocked,
url_match, url_soft_words), `urlfilter_signals` and the stage's `rejections`. Reasons:
`blocked_domain`, `blocked_host`, `blocked_url`, `blocked_word`, `blocked_subword` (the first
list that matches, in that order), then `soft_url_words` (urlfilter.soft_word_threshold or more
soft-banned words). The lists are read once on the driver and broadcast.
"""

from __future__ import annotations

from typing import Any

from tokenmill.jobs.filtering import FilterStage, Rule, run_filter_stage, signals_key
from tokenmill.jobs.runtime import JobContext, JobError, job_parser, run_job
from tokenmill.schemas.tables import DOCS, LANGID_NAME, URLFILTER_NAME, URLFILTER_SIGNALS

JOB = URLFILTER_NAME
STAGE = FilterStage(
    name=URLFILTER_NAME,
    inputs=(LANGID_NAME, DOCS.name),
    signals=URLFILTER_SIGNALS,
    description="Documents whose URL is on no blocklist, with the URL signals.",
)
BLOCK_KINDS = ("domain", "host", "url", "word", "subword")


def load_lists(cfg: Any) -> Any:
    from tokenmill.udfs.urlfilter import load_blocklist

    try:
        return load_blocklist(
            domains_files=cfg.domains_files,
            hosts_files=cfg.hosts_files,
            urls_files=cfg.urls_files,
            banned_words_files=cfg.banned_words_files,
            banned_subwords_files=cfg.banned_subwords_files,
            soft_words_files=cfg.soft_words_files,
            ut1_dirs=cfg.ut1_dirs,
            ut1_categories=cfg.ut1_categories,
            include_defaults=cfg.use_default_lists,
        )
    except (OSError, ValueError) as e:
        raise JobError(f"urlfilter: cannot load the blocklists: {e}") from None


def make_checker(lists: Any) -> Any:
    def check(cols: dict[str, list[Any]]) -> dict[str, list[Any]]:
        blocklist = lists.value
        results = [blocklist.check(url) for url in cols["url"]]
        return {
            "url_blocked": [r[0] for r in results],
            "url_match": [r[1] for r in results],
            "url_soft_words": [r[2] for r in results],
        }

    return check


def url_rules(cfg: Any) -> list[Rule]:
    from pyspark.sql import functions as F

    rules: list[Rule] = [
        (f"blocked_{kind}", F.col("url_blocked") == kind) for kind in BLOCK_KINDS
    ]
    rules.append(("soft_url_words", F.col("url_soft_words") >= cfg.soft_word_threshold))
    return rules


def urlfilter(ctx: JobContext) -> None:
    cfg = ctx.config.urlfilter
    blocklist = load_lists(cfg)
    lists = ctx.spark.sparkContext.broadcast(blocklist)
    ctx.notes.append(f"lists={blocklist.fingerprint()}")
    try:
        run_filter_stage(
            ctx,
            STAGE,
            key=signals_key(lists=blocklist.fingerprint()),
            compute_columns=("url",),
            compute=make_checker(lists),
            rules=url_rules(cfg),
        )
    finally:
        lists.unpersist()


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Drop documents whose URL is on a blocklist.")
    parser.add_argument("--input-table", help="table to read (default: langid, else docs)")
    return run_job(JOB, parser, urlfilter, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Data contracts: the expectation suite of every output table, spelled once, as data.

Each function takes the pipeline config (thresholds live there) and returns the table's list of
Great Expectations expectations; `jobs/gates.py` runs them on the table version a job has just
written. Every expectation carries a `description`: it is the contract in words, shown in the
Data Docs and in the gate's failure lines ("langid: lang_score >= 0.65 failed for 3 of 111
rows").

Required columns are the ones a table holds whichever stages ran before it: the `docs`
columns plus the stage's own signals (a filter stage keeps its input's columns, and the input
may be `docs` when earlier stages were skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import great_expectations.expectations as gxe
from great_expectations.expectations.row_conditions import Column

from tokenmill.schemas.tables import (
    CLEAN_NAME,
    DEDUP_EXTRA_COLUMNS,
    DEDUPED_NAME,
    DOCS,
    LANGID_NAME,
    LANGID_SIGNALS,
    PII_SIGNALS,
    QUALITY_DERIVED,
    QUALITY_NAME,
    QUALITY_SIGNALS,
    SHARD_DOCS,
    URLFILTER_NAME,
    URLFILTER_SIGNALS,
)

if TYPE_CHECKING:
    from tokenmill.jobs.config import PipelineConfig

Expectation = gxe.Expectation
Suite = Callable[["PipelineConfig"], list[Expectation]]

# Not stored in `deduped`: the gate computes it before validating (jobs/gates.py). It is the
# exact-dedup key as dedup computes it, sha1 of the normalised text *after* boilerplate lines
# were removed; the table's own `text_hash` column is still the input's (before removal).
EXACT_HASH = "exact_hash"

# Residual PII in `clean`, in Java's regex dialect (Spark's rlike). Coarser than Presidio on
# purpose: conservative shapes that a masked text should no longer hold. The masks
# (<EMAIL>, <PHONE>) match neither. Each pattern starts only where its run of characters
# starts (lookbehind) and the e-mail's local part is possessive, so a long run without a match
# (a base64 blob) is scanned once, not once per start position.
EMAIL_PATTERN = (
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]++@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
PHONE_PATTERN = (
    # North American: (415) 555-0123, 415-555-0123, +1 415.555.0123
    r"(?<![\d+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\d)"
    # International with a country code: +44 20 7946 0958, +49-30-1234-5678
    r"|(?<![\d+])\+\d{1,3}(?:[ .-]\d{2,4}){3,4}(?!\d)"
)


def suite_name(table: str) -> str:
    """The suite's name in Great Expectations (and in the Data Docs)."""
    return f"tokenmill.{table}"


def _names(*groups: Iterable[tuple[str, object]]) -> list[str]:
    return [name for group in groups for name, _ in group]


DOCS_COLUMNS = [f.name for f in DOCS.schema]


def has_columns(columns: list[str]) -> Expectation:
    return gxe.ExpectTableColumnsToMatchSet(
        column_set=columns, exact_match=False, description="has the table's required columns"
    )


def not_null(column: str) -> Expectation:
    return gxe.ExpectColumnValuesToNotBeNull(column=column, description=f"{column} not null")


def document_expectations(columns: list[str], config: PipelineConfig) -> list[Expectation]:
    """What every document table promises: its columns, one row per non-null doc_id, and a
    text that is neither missing, empty nor longer than any page ingest accepts."""
    max_chars = config.gates.max_text_chars
    return [
        has_columns(columns),
        not_null("doc_id"),
        gxe.ExpectColumnValuesToBeUnique(column="doc_id", description="doc_id unique"),
        not_null("text"),
        gxe.ExpectColumnValueLengthsToBeBetween(
            column="text", min_value=1, max_value=max_chars,
            description=f"text length in [1, {max_chars}]",
        ),
    ]


def docs_expectations(config: PipelineConfig) -> list[Expectation]:
    return document_expectations(DOCS_COLUMNS, config)


def langid_expectations(config: PipelineConfig) -> list[Expectation]:
    """The langid stage's predicate, restated: a language, in the target set, scored at or
    above its threshold. Languages with their own threshold (langid.thresholds) get one
    expectation each, restricted to their rows; every other row is held to langid.min_score.
    (One expectation at the minimum threshold would let a `de` page at 0.7 through when `de`
    needs 0.8.)"""
    cfg = config.langid
    out = document_expectations(DOCS_COLUMNS + _names(LANGID_SIGNALS), config)
    out += [not_null("lang"), not_null("lang_score")]
    if cfg.languages:
        out.append(gxe.ExpectColumnValuesToBeInSet(
            column="lang", value_set=list(cfg.languages),
            description=f"lang in {{{', '.join(cfg.languages)}}}",
        ))
    own = {
        lang: t for lang, t in sorted(cfg.thresholds.items())
        if t != cfg.min_score and (not cfg.languages or lang in cfg.languages)
    }
    for lang, t in own.items():
        out.append(gxe.ExpectColumnValuesToBeBetween(
            column="lang_score", min_value=t, row_condition=Column("lang") == lang,
            description=f"lang_score >= {t} where lang = {lang}",
        ))
    if not own:
        out.append(gxe.ExpectColumnValuesToBeBetween(
            column="lang_score", min_value=cfg.min_score,
            description=f"lang_score >= {cfg.min_score}",
        ))
    elif not cfg.languages or set(cfg.languages) - set(own):
        out.append(gxe.ExpectColumnValuesToBeBetween(
            column="lang_score", min_value=cfg.min_score,
            row_condition=Column("lang").is_not_in(list(own)),
            description=f"lang_score >= {cfg.min_score} where lang not in {{{', '.join(own)}}}",
        ))
    return out


def urlfilter_expectations(config: PipelineConfig) -> list[Expectation]:
    return document_expectations(DOCS_COLUMNS + _names(URLFILTER_SIGNALS), config)


def quality_expectations(config: PipelineConfig) -> list[Expectation]:
    return document_expectations(
        DOCS_COLUMNS + _names(QUALITY_SIGNALS, QUALITY_DERIVED), config
    )


def deduped_expectations(config: PipelineConfig) -> list[Expectation]:
    """No two kept documents share an exact-dedup hash (near duplicates are dedup's own
    business: checking them means rerunning MinHash)."""
    return [
        *document_expectations(DOCS_COLUMNS + _names(DEDUP_EXTRA_COLUMNS), config),
        gxe.ExpectColumnValuesToBeUnique(
            column=EXACT_HASH, description="no exact duplicates (normalised-text hash unique)"
        ),
    ]


def clean_expectations(config: PipelineConfig) -> list[Expectation]:
    """At most gates.max_residual_pii_rate of the documents still hold an e-mail address or a
    phone-like number after masking."""
    rate = config.gates.max_residual_pii_rate
    mostly = 1.0 - rate
    return [
        *document_expectations(DOCS_COLUMNS + _names(PII_SIGNALS), config),
        gxe.ExpectColumnValuesToNotMatchRegex(
            column="text", regex=EMAIL_PATTERN, mostly=mostly,
            description=f"e-mail addresses left in at most {rate:.2%} of documents",
        ),
        gxe.ExpectColumnValuesToNotMatchRegex(
            column="text", regex=PHONE_PATTERN, mostly=mostly,
            description=f"phone numbers left in at most {rate:.2%} of documents",
        ),
    ]


def shard_docs_expectations(config: PipelineConfig) -> list[Expectation]:
    """Every .idx entry named once, holding at least its EOS token; a document once per run
    (the table accumulates runs, so doc_id alone repeats). The counts against the manifest
    and the .bin files are checked by jobs/gates.check_shards_against_manifest."""
    return [
        has_columns([f.name for f in SHARD_DOCS.schema]),
        not_null("doc_id"),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["shard", "doc_index"], description="(shard, doc_index) unique"
        ),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["run_id", "doc_id"], description="(run_id, doc_id) unique"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="tokens", min_value=0, strict_min=True, description="tokens > 0"
        ),
    ]


SUITES: dict[str, Suite] = {
    DOCS.name: docs_expectations,
    LANGID_NAME: langid_expectations,
    URLFILTER_NAME: urlfilter_expectations,
    QUALITY_NAME: quality_expectations,
    DEDUPED_NAME: deduped_expectations,
    CLEAN_NAME: clean_expectations,
    SHARD_DOCS.name: shard_docs_expectations,
}

# Columns a suite checks that the table does not store: the gate adds them before validating.
DERIVED_COLUMNS: dict[str, tuple[str, ...]] = {DEDUPED_NAME: (EXACT_HASH,)}


def expectations_for(table: str, config: PipelineConfig) -> list[Expectation]:
    """The suite of `table`; a table without one is a mistake, not a pass."""
    suite = SUITES.get(table)
    if suite is None:
        raise ValueError(f"no expectation suite for table {table!r} (known: {', '.join(SUITES)})")
    return suite(config)

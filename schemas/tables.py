"""Table names and Spark schemas: the one place a table or column name is spelled.

Every table lives at `<lake root>/<name>`. A schema change bumps the table's version, which is
written into the Delta table's properties so a reader can refuse a table it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


@dataclass(frozen=True)
class Table:
    name: str
    schema: StructType
    version: int
    key: tuple[str, ...]  # columns that identify a row: MERGE keys for idempotent writes
    description: str


def _schema(*fields: tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])


DOCS = Table(
    name="docs",
    version=1,
    key=("doc_id",),
    description="One row per ingested document (web page or document of another source).",
    schema=_schema(
        ("doc_id", StringType(), False),
        ("source", StringType(), False),
        ("url", StringType(), True),
        ("host", StringType(), True),
        ("domain", StringType(), True),  # registered domain (public suffix + 1 label)
        ("crawl_id", StringType(), True),
        ("warc_path", StringType(), True),
        ("record_offset", LongType(), True),
        ("fetch_time", TimestampType(), True),
        ("content_type", StringType(), True),
        ("charset", StringType(), True),
        ("html_bytes", LongType(), True),
        ("text", StringType(), False),
        ("text_length", IntegerType(), False),
        ("text_hash", StringType(), False),  # sha1 of the normalised text (exact dedup key)
        ("run_id", StringType(), False),
    ),
)

WARCS = Table(
    name="warcs",
    version=1,
    key=("path",),
    description="Ledger of input files: the base of exactly-once ingest and nightly refresh.",
    schema=_schema(
        ("path", StringType(), False),
        ("status", StringType(), False),  # done | failed
        ("records", LongType(), False),
        ("responses", LongType(), False),
        ("docs", LongType(), False),
        ("rejected", LongType(), False),
        ("bytes", LongType(), True),
        ("error", StringType(), True),
        ("run_id", StringType(), False),
        ("updated_at", TimestampType(), False),
    ),
)

REJECTIONS = Table(
    name="rejections",
    version=1,
    key=("stage", "doc_id"),
    description="Every dropped document: which stage dropped it, why, and the deciding values.",
    schema=_schema(
        ("doc_id", StringType(), False),
        ("url", StringType(), True),
        ("stage", StringType(), False),
        ("reason", StringType(), False),
        ("signals", MapType(StringType(), StringType()), True),
        ("source_path", StringType(), True),
        ("record_offset", LongType(), True),
        ("run_id", StringType(), False),
    ),
)

RUNS = Table(
    name="runs",
    version=2,
    key=("job", "run_id"),
    description="One row per job run: inputs and their Delta versions, counts, timing, status.",
    schema=_schema(
        ("job", StringType(), False),
        ("run_id", StringType(), False),
        ("status", StringType(), False),  # running | succeeded | failed
        ("input_table", StringType(), True),
        ("input_version", LongType(), True),
        ("output_table", StringType(), True),
        ("output_version", LongType(), True),
        ("rows_in", LongType(), True),
        ("rows_out", LongType(), True),
        ("counts", MapType(StringType(), LongType()), True),
        ("config_hash", StringType(), False),
        ("started_at", TimestampType(), False),
        ("ended_at", TimestampType(), True),
        ("error", StringType(), True),
        # v2: the output's data-quality gate (schemas/expectations.py) and what the run cost.
        ("gate_status", StringType(), True),  # passed | failed | null (no suite, gates off)
        ("gate_summary", StringType(), True),  # one line per failed expectation
        ("task_seconds", DoubleType(), True),  # executor task time: core-seconds occupied
        ("cpu_seconds", DoubleType(), True),  # executor JVM CPU time (Python workers excluded)
    ),
)

# The dedup stage's output: the input's columns (whatever stage it read), texts with boilerplate
# lines removed, one document per duplicate cluster. Its schema follows the input's.
DEDUPED_NAME = "deduped"
DEDUP_EXTRA_COLUMNS = (("boilerplate_lines", IntegerType()),)

DUP_CLUSTERS = Table(
    name="dup_clusters",
    version=1,
    key=("doc_id",),
    description="Every document that belongs to a duplicate cluster, for audit.",
    schema=_schema(
        ("doc_id", StringType(), False),
        ("cluster_id", StringType(), False),
        ("representative", StringType(), False),  # the cluster's kept document
        ("cluster_size", LongType(), False),
        ("kind", StringType(), False),  # exact | near
        ("similarity", StringType(), True),  # verified Jaccard to the representative's edge
        ("run_id", StringType(), False),
    ),
)

LSH_INDEX = Table(
    name="lsh_index",
    version=1,
    key=("doc_id",),
    description=(
        "Kept documents' MinHash signatures and band hashes, joined by the next incremental "
        "run. signature[i] is datasketch's hashvalues[i] stored as a signed 32-bit int."
    ),
    schema=_schema(
        ("doc_id", StringType(), False),
        ("text_hash", StringType(), False),
        ("signature", ArrayType(IntegerType(), True), False),
        ("band_hashes", ArrayType(LongType(), True), False),
        # The shingle hashes (uint32 as int32), kept when dedup.verify is `exact` so that new
        # documents are verified exactly against old ones too.
        ("shingles", ArrayType(IntegerType(), True), True),
        ("run_id", StringType(), False),
    ),
)


# Ingest's reasons for dropping a record; the sample crawl's labels use the same strings.
INGEST_REASONS = (
    "bad_http",  # HTTP status line or headers could not be parsed
    "http_status",  # not a 200 response
    "not_html",  # content type outside the configured HTML types
    "too_large",  # payload over ingest.max_html_bytes
    "truncated_record",  # fewer payload bytes than the record declares (file cut short)
    "undecodable",  # too many invalid or control characters after charset decoding
    "empty_text",  # nothing left after main-text extraction
    "extract_error",  # the extractor raised on the page
    "corrupt_record",  # unreadable bytes (gzip or WARC framing); reading resumed after them
    "duplicate_record_id",  # the same record id twice in one run's input
    "bad_source_row",  # a JSONL/Parquet row without an id or text
)
# File-level outcomes ("empty_file", "unreadable_file", "failed_file") are counted in
# runs.counts; they are not documents, so they get no rejection rows.


# --------------------------------------------------------------------------- filter stages
# Each filter stage writes its kept rows as a table named after the stage: the input's columns
# plus the stage's signal columns (so signals accumulate down the pipeline). Its signals for
# every input document, kept or not, live in `<stage>_signals`, keyed by doc_id and by what
# they were computed from (`input_hash` of text and url, `signals_key` of the models, lists
# and parameters): a changed threshold re-applies the predicate without recomputing them.
LANGID_NAME = "langid"
URLFILTER_NAME = "urlfilter"
QUALITY_NAME = "quality"
FILTER_STAGES = (LANGID_NAME, URLFILTER_NAME, QUALITY_NAME)
CLEAN_NAME = "clean"  # the PII stage's output: masked text, nothing dropped

LANGID_SIGNALS: tuple[tuple[str, DataType], ...] = (
    ("lang", StringType()),  # fastText lid.176's top label (None for empty text)
    ("lang_score", DoubleType()),
    ("lang2", StringType()),  # second-best label: mixed-language pages show here
    ("lang2_score", DoubleType()),
)

URLFILTER_SIGNALS: tuple[tuple[str, DataType], ...] = (
    ("url_blocked", StringType()),  # domain | host | url | word | subword | None
    ("url_match", StringType()),  # the list entry that matched
    ("url_soft_words", IntegerType()),  # soft-banned words in the URL
)

_I, _D = IntegerType(), DoubleType()
QUALITY_SIGNALS: tuple[tuple[str, DataType], ...] = (
    # repair (ftfy)
    ("ftfy_fixed", _I), ("mojibake_per_kchar", _D), ("replacement_char_fraction", _D),
    # Gopher repetition
    ("dup_line_fraction", _D), ("dup_para_fraction", _D),
    ("dup_line_char_fraction", _D), ("dup_para_char_fraction", _D),
    ("top_2gram_char_fraction", _D), ("top_3gram_char_fraction", _D),
    ("top_4gram_char_fraction", _D),
    *((f"dup_{n}gram_char_fraction", _D) for n in range(5, 11)),
    # Gopher quality
    ("words", _I), ("mean_word_length", _D), ("hash_ratio", _D), ("ellipsis_ratio", _D),
    ("bullet_lines_ratio", _D), ("ellipsis_lines_ratio", _D), ("alpha_words_ratio", _D),
    ("stop_words", _I),
    # C4 (after its line cleaning, which rewrites `text`)
    ("c4_lines_removed", _I), ("c4_chars_removed", _I), ("c4_lines_kept", _I),
    ("c4_sentences", _I), ("c4_lorem_ipsum", _I), ("c4_curly_bracket", _I),
    # FineWeb
    ("line_punct_ratio", _D), ("short_line_ratio", _D), ("char_dup_ratio", _D),
    ("newline_ratio", _D),
    # cc_net perplexity (None where the language has no model) and toxicity
    ("perplexity", _D),
    ("toxic_words", _I), ("toxic_word_ratio", _D), ("toxic_score", _D),
)
# Columns of the input that the quality stage rewrites (C4 line cleaning changes the text).
QUALITY_REWRITES: tuple[tuple[str, DataType], ...] = (
    ("text", StringType()), ("text_length", IntegerType()), ("text_hash", StringType()),
)
# Derived at predicate time from the stored cutoffs, so re-thresholding stays cheap.
QUALITY_DERIVED: tuple[tuple[str, DataType], ...] = (("ppl_bucket", StringType()),)

PERPLEXITY_CUTOFFS = Table(
    name="perplexity_cutoffs",
    version=1,
    key=("lang",),
    description="Per-language perplexity percentiles the quality stage buckets by (cc_net).",
    schema=_schema(
        ("lang", StringType(), False),
        ("head_max", DoubleType(), False),  # perplexity at the head percentile
        ("middle_max", DoubleType(), False),  # perplexity at the tail percentile
        ("docs", LongType(), False),
        ("model_fingerprint", StringType(), True),
        ("run_id", StringType(), False),
    ),
)

# Reasons of the filter stages (quality's rule reasons live in udfs/quality.QUALITY_RULES).
LANGID_REASONS = ("no_language", "lang_not_target", "lang_low_score")
URLFILTER_REASONS = (
    "blocked_domain", "blocked_host", "blocked_url", "blocked_word", "blocked_subword",
    "soft_url_words",
)
QUALITY_EXTRA_REASONS = ("perplexity_bucket", "max_perplexity", "toxic_words", "toxic_classifier")


def signals_table(stage: str, signals: tuple[tuple[str, DataType], ...],
                  rewrites: tuple[tuple[str, DataType], ...] = ()) -> Table:
    """`<stage>_signals`: one row per input document with the stage's signals."""
    return Table(
        name=f"{stage}_signals",
        version=1,
        key=("doc_id",),
        description=f"The {stage} stage's signals for every document it has seen.",
        schema=_schema(
            ("doc_id", StringType(), False),
            ("input_hash", StringType(), False),
            ("signals_key", StringType(), False),
            *((n, t, True) for n, t in rewrites),
            *((n, t, True) for n, t in signals),
            ("run_id", StringType(), False),
        ),
    )


# The PII stage's signals: masked matches per entity type (column per type, fixed order).
PII_SIGNALS: tuple[tuple[str, DataType], ...] = tuple(
    (f"pii_{t.lower()}", IntegerType())
    for t in ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IP_ADDRESS", "IBAN_CODE",
              "US_SSN", "PERSON")
) + (("pii_masked", IntegerType()),)

SHARD_DOCS = Table(
    name="shard_docs",
    version=1,
    key=("shard", "doc_index"),
    description=(
        "Which document each .idx entry of a token shard holds: the trainer maps a batch back "
        "to doc_ids through it (quarantine), a data engineer a doc_id to its tokens."
    ),
    schema=_schema(
        ("shard", StringType(), False),  # <run_id>/<source>/part-NNNNN, relative to shards/
        ("doc_index", LongType(), False),  # the document's position in the .idx
        ("doc_id", StringType(), False),
        ("source", StringType(), False),
        ("tokens", LongType(), False),  # including the EOS token
        ("run_id", StringType(), False),
    ),
)

"""Ingest: WARC files (or JSONL/Parquet sources) → the `docs` table.

    spark-submit jobs/ingest.py --root lake --input 'crawl/*.warc.gz'
    spark-submit jobs/ingest.py --root lake --input warc.paths.gz      # Common Crawl list
    spark-submit jobs/ingest.py --root lake --format jsonl --source wikipedia --input 'wiki/*.jsonl'

Exactly once: the `warcs` ledger names every input file already ingested; those are skipped.
Extraction runs once into a staging folder; then docs, rejections and the ledger are written in
that order with key-based merges, so a run killed anywhere and run again leaves no duplicates
and loses nothing. Input files are opened inside Spark tasks, never on the driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd  # module level: pandas_udf resolves the type hints against these globals

from tokenmill.jobs import lakeio
from tokenmill.jobs.config import IngestConfig
from tokenmill.jobs.runtime import (
    EXIT_PARTIAL,
    JobContext,
    JobError,
    delete_path,
    job_parser,
    run_job,
)
from tokenmill.schemas.tables import DOCS, WARCS

JOB = "ingest"

# One row type out of the extraction tasks: documents, rejections and per-file summaries, so
# each file is read exactly once.
_STAGING_FIELDS = [
    ("kind", "string"),
    ("doc_id", "string"),
    ("source", "string"),
    ("url", "string"),
    ("host", "string"),
    ("domain", "string"),
    ("crawl_id", "string"),
    ("warc_path", "string"),
    ("record_offset", "bigint"),
    ("fetch_time", "timestamp"),
    ("content_type", "string"),
    ("charset", "string"),
    ("html_bytes", "bigint"),
    ("text", "string"),
    ("text_length", "int"),
    ("text_hash", "string"),
    ("reason", "string"),
    ("signals", "map<string,string>"),
    ("status", "string"),
    ("error", "string"),
    ("bytes", "bigint"),
    ("records", "bigint"),
    ("responses", "bigint"),
    ("docs", "bigint"),
    ("rejected", "bigint"),
]
STAGING_DDL = ", ".join(f"{n} {t}" for n, t in _STAGING_FIELDS)
_BATCH_ROWS = 256
_BATCH_TEXT_BYTES = 32 << 20


def resolve_inputs(spec: str, cfg: IngestConfig) -> list[str]:
    """A glob, a list file (`@paths.txt`, `*.txt`, `*.lst`) or Common Crawl's warc.paths.gz."""
    if spec.startswith("@"):
        return lakeio.read_path_list(spec[1:])
    name = spec.rsplit("/", 1)[-1]
    if name.endswith(".paths.gz") or name.endswith(".paths"):
        return lakeio.read_path_list(spec, cfg.cc_url_prefix)
    if name.endswith((".txt", ".lst")):
        return lakeio.read_path_list(spec)
    return lakeio.expand_glob(spec)


def make_warc_reader(cfg: IngestConfig) -> Any:
    """The function Spark runs per partition of input paths (Arrow batches in and out)."""
    from tokenmill.udfs.warc import WarcReadOptions

    opts = WarcReadOptions(
        max_html_bytes=cfg.max_html_bytes,
        max_bad_char_fraction=cfg.max_bad_char_fraction,
        html_content_types=cfg.html_content_types,
        extractor=cfg.extractor,
        main_content=cfg.main_content,
        min_text_chars=cfg.min_text_chars,
        source=cfg.source,
    )

    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    schema = to_arrow_schema(_parse_datatype_string(STAGING_DDL), timezone="UTC")  # driver

    def read_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from tokenmill.jobs import lakeio as io_
        from tokenmill.udfs.warc import read_warc_file

        rows: list[dict[str, Any]] = []
        text_bytes = 0
        for batch in batches:
            for path in batch.column(0).to_pylist():
                size = None
                try:
                    size = io_.file_size(path)
                except Exception:  # noqa: BLE001 - read_warc_file reports the open failure
                    pass
                opener = lambda off, p=path: io_.open_at(p, off)  # noqa: E731
                for row in read_warc_file(path, opener, opts, size):
                    rows.append(row)
                    text_bytes += len(row.get("text") or "")
                    if len(rows) >= _BATCH_ROWS or text_bytes >= _BATCH_TEXT_BYTES:
                        yield pa.RecordBatch.from_pylist(rows, schema=schema)
                        rows, text_bytes = [], 0
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return read_partition


def already_done(ctx: JobContext, paths: list[str]) -> set[str]:
    from tokenmill.jobs.runtime import delta_exists

    ledger = ctx.path(WARCS)
    if not delta_exists(ctx.spark, ledger):
        return set()
    wanted = ctx.spark.createDataFrame([(p,) for p in paths], "path string")
    done = (
        ctx.spark.read.format("delta").load(ledger)
        .where("status = 'done'")
        .join(wanted, "path")
        .select("path")
        .collect()
    )
    return {r["path"] for r in done}


def write_outputs(ctx: JobContext, staged: Any) -> None:
    """docs, then rejections, then the ledger: a crash between them is repaired by the rerun,
    which re-extracts the files the ledger does not yet list and merges nothing twice."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = ctx.spark
    docs = staged.where("kind = 'doc'").withColumn("run_id", F.lit(ctx.run_id))
    # The same record id twice in one run's input (a file listed twice under two names, a
    # re-crawl): keep the first by (path, offset), deterministically.
    rank = F.row_number().over(Window.partitionBy("doc_id").orderBy("warc_path", "record_offset"))
    docs = docs.withColumn("_rank", rank)
    repeated = docs.where("_rank > 1").select(
        "doc_id",
        "url",
        F.lit("duplicate_record_id").alias("reason"),
        F.create_map(F.lit("first_path"), F.lit("see docs")).alias("signals"),
        F.col("warc_path").alias("source_path"),
        "record_offset",
    )
    docs = docs.where("_rank = 1").drop("_rank")

    with ctx.step("write docs"):
        ctx.output_table = DOCS.name
        ctx.output_version = ctx.merge(DOCS, docs)
    with ctx.step("write rejections"):
        rejects = staged.where("kind = 'reject'").select(
            "doc_id",
            "url",
            "reason",
            "signals",
            F.col("warc_path").alias("source_path"),
            "record_offset",
        )
        ctx.add_rejections(rejects.unionByName(repeated))
    with ctx.step("update warcs ledger"):
        files = staged.where("kind = 'file'").select(
            F.col("warc_path").alias("path"),
            "status",
            F.coalesce("records", F.lit(0)).alias("records"),
            F.coalesce("responses", F.lit(0)).alias("responses"),
            F.coalesce("docs", F.lit(0)).alias("docs"),
            F.coalesce("rejected", F.lit(0)).alias("rejected"),
            "bytes",
            "error",
            F.lit(ctx.run_id).alias("run_id"),
            F.current_timestamp().alias("updated_at"),
        )
        ctx.merge(WARCS, files, update=True)
    spark.catalog.clearCache()


def count_outcomes(ctx: JobContext, staged: Any) -> None:
    """Per-reason counts from the staged rows (a small aggregate, not the rows)."""
    from pyspark.sql import functions as F

    agg = (
        staged.groupBy("kind", "reason", "status")
        .agg(F.count("*").alias("n"), F.sum("responses").alias("responses"))
        .collect()
    )
    docs = responses = failed = 0
    for r in agg:
        if r["kind"] == "doc":
            docs += r["n"]
        elif r["kind"] == "reject":
            ctx.counts[r["reason"]] += r["n"]
        elif r["kind"] == "file":
            responses += r["responses"] or 0
            if r["reason"]:
                ctx.counts[r["reason"]] += r["n"]
            if r["status"] == "failed":
                failed += r["n"]
                ctx.counts["failed_file"] += r["n"]
    repeated = (
        staged.where("kind = 'doc'").groupBy("doc_id").count().where("count > 1")
        .agg(F.sum(F.col("count") - 1).alias("extra")).collect()[0]["extra"]
    )
    dups = int(repeated or 0)
    if dups:
        ctx.counts["duplicate_record_id"] += dups
    ctx.rows_in = responses
    ctx.rows_out = docs - dups
    if failed:
        ctx.exit_code = EXIT_PARTIAL
        ctx.notes.append(f"failed_files={failed}")


def ingest_warcs(ctx: JobContext, paths: list[str]) -> None:
    cfg = ctx.config.ingest
    sc = ctx.spark.sparkContext
    # Staging of runs that were killed is garbage now (their files are not in the ledger and
    # are extracted again below); one writer per lake, so clearing it is safe.
    delete_path(ctx.spark, ctx.staging_path())
    slices = max(1, math.ceil(len(paths) / cfg.files_per_task))
    path_df = ctx.spark.createDataFrame(
        sc.parallelize([(p,) for p in paths], slices), "path string"
    )
    with ctx.step("extract text from WARC files"):
        staged = ctx.stage(path_df.mapInArrow(make_warc_reader(cfg), STAGING_DDL), ctx.run_id)
    with ctx.step("count outcomes"):
        count_outcomes(ctx, staged)
    write_outputs(ctx, staged)
    with ctx.step("clean staging"):
        delete_path(ctx.spark, ctx.staging_path())


def ingest_records(ctx: JobContext, paths: list[str], fmt: str) -> None:
    """JSONL/Parquet sources (Wikipedia dumps, code, books …) into the same `docs` table."""
    from pyspark.sql import functions as F

    cfg = ctx.config.ingest
    source = ctx.args.source or cfg.source
    reader = ctx.spark.read.format("json" if fmt == "jsonl" else "parquet")
    raw = reader.load(paths).withColumn("_path", F.input_file_name())
    for key in ("id_field", "text_field"):
        name = getattr(cfg, key)
        if name not in raw.columns:
            raise JobError(
                f"ingest.{key}: column {name!r} not in the {fmt} input "
                f"(columns: {', '.join(c for c in raw.columns if c != '_path')})"
            )
    url = F.col(cfg.url_field).cast("string") if cfg.url_field in raw.columns else F.lit(None)
    rows = raw.select(
        F.col(cfg.id_field).cast("string").alias("key"),
        F.col(cfg.text_field).cast("string").alias("text"),
        url.cast("string").alias("url"),
        "_path",
    )

    @F.pandas_udf("doc_id string, host string, domain string, text_hash string")
    def derive(key: pd.Series, text: pd.Series, url: pd.Series) -> pd.DataFrame:
        from tokenmill.udfs.ids import doc_id_from_source_key
        from tokenmill.udfs.text import text_hash
        from tokenmill.udfs.urls import host_and_domain

        hosts = [host_and_domain(u) for u in url]
        return pd.DataFrame(
            {
                "doc_id": [doc_id_from_source_key(source, k) if k else None for k in key],
                "host": [h for h, _ in hosts],
                "domain": [d for _, d in hosts],
                "text_hash": [text_hash(t) if t else None for t in text],
            }
        )

    good = (F.col("key").isNotNull() & (F.length("key") > 0) & F.col("text").isNotNull()
            & (F.length(F.trim("text")) >= F.lit(max(1, cfg.min_text_chars))))
    with ctx.step(f"read {fmt} records"):
        staged_raw = ctx.stage(
            rows.withColumn("d", derive("key", "text", "url")).withColumn("ok", good), ctx.run_id
        )
    docs = staged_raw.where("ok").select(
        F.lit("doc").alias("kind"),
        "d.doc_id",
        F.lit(source).alias("source"),
        "url",
        "d.host",
        "d.domain",
        F.lit(None).cast("string").alias("crawl_id"),
        F.col("_path").alias("warc_path"),
        F.lit(None).cast("bigint").alias("record_offset"),
        F.lit(None).cast("timestamp").alias("fetch_time"),
        F.lit(None).cast("string").alias("content_type"),
        F.lit("utf-8").alias("charset"),
        F.lit(None).cast("bigint").alias("html_bytes"),
        "text",
        F.length("text").alias("text_length"),
        "d.text_hash",
    )
    bad = staged_raw.where("not ok").select(
        F.lit("reject").alias("kind"),
        F.sha1(F.concat_ws("\u0000", F.lit(source), "_path", F.coalesce("key", F.lit("")),
                           F.coalesce("text", F.lit("")))).substr(1, 32).alias("doc_id"),
        "url",
        F.lit("bad_source_row").alias("reason"),
        F.create_map(F.lit("missing"), F.when(F.col("key").isNull(), "id").otherwise("text"))
        .alias("signals"),
        F.col("_path").alias("warc_path"),
    )
    files = staged_raw.groupBy("_path").agg(
        F.count("*").alias("records"),
        F.sum(F.col("ok").cast("long")).alias("docs"),
        F.sum((~F.col("ok")).cast("long")).alias("rejected"),
    ).select(
        F.lit("file").alias("kind"),
        F.col("_path").alias("warc_path"),
        F.lit("done").alias("status"),
        "records",
        F.col("records").alias("responses"),
        "docs",
        "rejected",
    )
    union = docs.unionByName(bad, allowMissingColumns=True)
    union = union.unionByName(files, allowMissingColumns=True)
    staged = union.select(
        [
            F.col(name) if name in union.columns else F.lit(None).cast(dtype).alias(name)
            for name, dtype in _STAGING_FIELDS
        ]
    )
    with ctx.step("count outcomes"):
        count_outcomes(ctx, staged)
    write_outputs(ctx, staged)
    with ctx.step("clean staging"):
        delete_path(ctx.spark, ctx.staging_path())


def ingest(ctx: JobContext) -> None:
    args = ctx.args
    cfg = ctx.config.ingest
    with ctx.step("list input files"):
        try:
            paths = resolve_inputs(args.input, cfg)
        except FileNotFoundError as e:
            raise JobError(f"--input: {e}") from None
        if not paths:
            raise JobError(f"--input {args.input!r} matched no file")
        done = already_done(ctx, paths)
    pending = [p for p in paths if p not in done]
    ctx.counts["skipped_already_ingested"] = len(done)
    ctx.notes.append(f"files={len(paths)} new={len(pending)}")
    if not pending:
        ctx.rows_in = ctx.rows_out = 0
        return
    if args.format == "warc":
        ingest_warcs(ctx, pending)
    else:
        ingest_records(ctx, pending, args.format)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Read WARC files or JSONL/Parquet sources into the docs table.")
    parser.add_argument(
        "--input",
        required=True,
        help="glob (local or s3a://), a list file (@file, *.txt, *.lst) or CC's warc.paths.gz",
    )
    parser.add_argument("--format", choices=("warc", "jsonl", "parquet"), default="warc")
    parser.add_argument("--source", help="source name for non-WARC input (e.g. wikipedia)")
    return run_job(JOB, parser, ingest, argv)


if __name__ == "__main__":
    raise SystemExit(main())

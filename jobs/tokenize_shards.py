"""Encodes the clean table with the trained tokenizer into Megatron-LM indexed-dataset shards.

    spark-submit jobs/tokenize_shards.py --root lake

(Not `jobs/tokenize.py`: spark-submit puts the script's folder first on the driver's and the
Python workers' sys.path, where a file named tokenize.py would replace the standard library's
`tokenize` for everything that imports it, inspect and linecache among them.)

Reads `clean` (else the newest cleaned table; --input-table) and the tokenizer named by
`<root>/tokenizer/latest.json`. Documents are hashed by doc_id into shards.partitions Spark
partitions; each task encodes its documents in doc_id order, Arrow batch by batch, appends
EOS to each, and writes one `.bin`/`.idx` pair per source (tokenize/FORMAT.md; uint16 when the
vocabulary is < 65,500, else int32) under `<root>/shards/<run_id>/<source>/`, each file
written under a temporary name and renamed, with a `.docids` sidecar naming each document
for the trainer. `shard_docs` records which doc_id every `.idx` entry holds. The manifest
(`<root>/shards/<run_id>/manifest.json`, then `<root>/shards/manifest.json`, written last: the
commit) lists every shard with its token and document counts, the tokens and mixture weight
of each source, the tokenizer's hash and the Delta versions read. Local lake roots only for
now (the tasks write files directly).

Documents a trainer quarantined (`<root>/quarantine/*.jsonl`, `quarantine` in the config;
tokenize/FORMAT.md) are left out and recorded in `rejections` with reason `quarantined`. Every
run applies every quarantine file, so deleting a file puts its documents back.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tokenmill.jobs.runtime import (
    JobContext,
    JobError,
    delta_exists,
    glob_paths,
    job_parser,
    local_copy,
    pick_input_table,
    read_small_text,
    run_job,
    ship_file,
)
from tokenmill.jobs.train_tokenizer import INPUTS, LATEST, TOKENIZER_DIR
from tokenmill.schemas.tables import REJECTIONS, SHARD_DOCS, Table
from tokenmill.tokenize.quarantine import SUFFIX, QuarantineEntry, parse_entries

log = logging.getLogger(__name__)
JOB = "tokenize_shards"
SHARDS_DIR = "shards"
MANIFEST = "manifest.json"
TASK_SCHEMA = "shard string, source string, doc_index long, doc_id string, tokens long"
QUARANTINED = "quarantined"  # the rejection reason, and the count in `runs`
REJECTION_SCHEMA = ("doc_id string, url string, reason string, signals map<string,string>, "
                    "source_path string, record_offset long")


def make_encoder(model: str, vocab_size: int, eos_id: int, out_dir: str) -> Any:
    def encode(batches: Any) -> Any:
        import pyarrow as pa
        from pyspark import TaskContext

        from tokenmill.jobs.tokenize_shards import sentencepiece_model
        from tokenmill.tokenize.shards import ShardWriter

        sp = sentencepiece_model(local_copy(model))
        part = TaskContext.get().partitionId()
        writers: dict[str, Any] = {}
        rows: dict[str, list[Any]] = {k: [] for k in ("shard", "source", "doc_index", "doc_id",
                                                       "tokens")}
        try:
            for batch in batches:
                cols = batch.to_pydict()
                ids = sp.encode(cols["text"])  # one call per Arrow batch
                for doc_id, source, tokens in zip(cols["doc_id"], cols["source"], ids,
                                                  strict=True):
                    source = source or "other"
                    rel = f"{source}/part-{part:05d}"
                    if source not in writers:
                        Path(out_dir, source).mkdir(parents=True, exist_ok=True)
                        writers[source] = ShardWriter(Path(out_dir, rel), vocab_size)
                    w = writers[source]
                    rows["shard"].append(rel)
                    rows["source"].append(source)
                    rows["doc_index"].append(w.documents)
                    rows["doc_id"].append(doc_id)
                    rows["tokens"].append(len(tokens) + 1)
                    w.add_document([*tokens, eos_id], doc_id)
            for w in writers.values():
                w.close()
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
        if rows["shard"]:
            yield pa.RecordBatch.from_pydict(rows)

    return encode


_MODELS: dict[str, Any] = {}


def sentencepiece_model(path: str) -> Any:
    """One SentencePieceProcessor per Python worker and model file."""
    if path not in _MODELS:
        import sentencepiece as spm

        _MODELS[path] = spm.SentencePieceProcessor(model_file=path)
    return _MODELS[path]


def quarantine_folder(ctx: JobContext) -> str:
    path = ctx.config.quarantine.path
    if "://" in path or Path(path).is_absolute():
        return path.rstrip("/")
    return ctx.path(path)


def read_quarantine(ctx: JobContext) -> list[tuple[str, QuarantineEntry]]:
    """Every entry of the quarantine folder's `*.jsonl` files, with the file it came from, in
    file then line order. A missing folder quarantines nothing."""
    found: list[tuple[str, QuarantineEntry]] = []
    # Through Hadoop's FileSystem, so an s3a:// quarantine folder reads like a local one.
    for path in glob_paths(ctx.spark, f"{quarantine_folder(ctx)}/*{SUFFIX}"):
        try:
            text = read_small_text(ctx.spark, path)
        except UnicodeDecodeError:
            raise JobError(f"malformed quarantine file {path}: not UTF-8 text") from None
        try:
            entries = parse_entries(text, path)
        except ValueError as e:
            raise JobError(f"malformed quarantine file {e}") from None
        found.extend((path, entry) for entry in entries)
    return found


def quarantined_documents(
    ctx: JobContext, found: list[tuple[str, QuarantineEntry]]
) -> tuple[dict[str, dict[str, str]], int]:
    """doc_id → the rejection signals of the first entry naming it, and the number of entries
    that name no document: a null doc_id whose (shard, doc_index) `shard_docs` does not hold."""
    from pyspark.sql import functions as F

    spark = ctx.spark
    # Shards written without a .docids sidecar: the trainer names the .idx entry, and
    # shard_docs (written by the run that made the shard) says which document it holds.
    wanted = sorted({(e.shard, e.doc_index) for _, e in found if e.doc_id is None})
    by_position: dict[tuple[str, int], str] = {}
    if wanted and delta_exists(spark, ctx.path(SHARD_DOCS)):
        keys = spark.createDataFrame(wanted, "shard string, doc_index long")
        rows = (
            spark.read.format("delta").load(ctx.path(SHARD_DOCS))
            .join(F.broadcast(keys), ["shard", "doc_index"])
            .select("shard", "doc_index", "doc_id").collect()
        )
        by_position = {(r["shard"], r["doc_index"]): r["doc_id"] for r in rows}
    signals: dict[str, dict[str, str]] = {}
    unresolved = 0
    for path, e in found:
        doc_id = e.doc_id if e.doc_id is not None else by_position.get((e.shard, e.doc_index))
        if doc_id is None:
            unresolved += 1
            continue
        # A document blamed by several spikes keeps its first (rejections hold one row).
        signals.setdefault(doc_id, {
            "train_run": e.train_run, "step": str(e.step), "sample": str(e.sample),
            "shard": e.shard, "doc_index": str(e.doc_index), "trainer_reason": e.reason,
            "quarantine_file": path,
        })
    return signals, unresolved


def quarantine_rejections(df: Any, quarantine: Any) -> Any:
    """The input documents named by `quarantine` (doc_id, signals) as `rejections` rows."""
    from pyspark.sql import functions as F

    def column(name: str, kind: str) -> Any:
        # The clean table carries ingest's columns; a table built another way may not.
        return (F.col(name) if name in df.columns else F.lit(None)).cast(kind)

    return df.join(F.broadcast(quarantine), "doc_id").select(
        "doc_id",
        column("url", "string").alias("url"),
        F.lit(QUARANTINED).alias("reason"),
        "signals",
        column("warc_path", "string").alias("source_path"),
        column("record_offset", "long").alias("record_offset"),
    )


def tokenize_shards(ctx: JobContext) -> None:
    from pyspark.sql import functions as F

    from tokenmill.tokenize.manifest import ShardEntry, build_manifest, write_manifest
    from tokenmill.tokenize.shards import dtype_for_vocab

    if "://" in ctx.root:
        raise JobError("tokenize_shards writes shard files from the tasks: local roots only")
    spark, cfg = ctx.spark, ctx.config.shards
    latest = f"{ctx.path(TOKENIZER_DIR)}/{LATEST}"
    try:
        tok = json.loads(read_small_text(spark, latest))
    except Exception:  # noqa: BLE001 - a missing file surfaces as a Java exception
        raise JobError(f"no tokenizer at {latest}: run jobs/train_tokenizer.py first") from None
    model_path = f"{ctx.path(TOKENIZER_DIR)}/{tok['path']}"
    found: list[tuple[str, QuarantineEntry]] = []
    if ctx.config.quarantine.enabled:
        with ctx.step("read quarantine"):
            found = read_quarantine(ctx)
    quarantine, unresolved = quarantined_documents(ctx, found)
    source_table = pick_input_table(ctx, INPUTS)
    df = ctx.read_table(Table(source_table, None, 0, ("doc_id",), ""))
    if "source" not in df.columns:
        df = df.withColumn("source", F.lit("other"))
    dropped = None
    if quarantine:
        with ctx.step("drop quarantined documents"):
            named = spark.createDataFrame(sorted(quarantine.items()),
                                          "doc_id string, signals map<string,string>")
            dropped = ctx.stage(quarantine_rejections(df, named), QUARANTINED)
            df = df.join(F.broadcast(named.select("doc_id")), "doc_id", "left_anti")
            ctx.counts[QUARANTINED] = dropped.count()
    if found:
        # Named documents that are not in the input (filtered out upstream since the trainer
        # saw them, or entries from another lake) drop nothing; a high count says the
        # quarantine folder does not belong to this lake.
        unmatched = len(quarantine) - ctx.counts[QUARANTINED] + unresolved
        log.info("tokenize_shards: %d quarantine entries in %d files: quarantined=%d "
                 "quarantine_unmatched=%d", len(found), len({p for p, _ in found}),
                 ctx.counts[QUARANTINED], unmatched)
    out_dir = Path(ctx.path(f"{SHARDS_DIR}/{ctx.run_id}"))
    out_dir.mkdir(parents=True, exist_ok=True)

    docs = (
        df.select("doc_id", "source", "text")
        .repartition(cfg.partitions, "doc_id")
        .sortWithinPartitions("source", "doc_id")
    )
    encoder = make_encoder(ship_file(spark, model_path), tok["vocab_size"], tok["eos_id"],
                           str(out_dir))
    with ctx.step("encode and write shards"):
        written = ctx.stage(docs.mapInArrow(encoder, TASK_SCHEMA), "shard_docs")
    with ctx.step("record shard_docs"):
        rows = written.withColumn("shard", F.concat(F.lit(f"{ctx.run_id}/"), "shard"))
        ctx.merge(SHARD_DOCS, rows.withColumn("run_id", F.lit(ctx.run_id)))
    # Every run re-applies every quarantine file, so it replaces this stage's rejections: a
    # document whose quarantine file was deleted is in the shards again, and leaves them.
    if dropped is not None or delta_exists(spark, ctx.path(REJECTIONS)):
        with ctx.step("record quarantined documents"):
            if dropped is None:
                dropped = spark.createDataFrame([], REJECTION_SCHEMA)
            ctx.add_rejections(dropped, replace_stage=True)
    with ctx.step("write the manifest"):
        per_shard = (
            written.groupBy("shard", "source")
            .agg(F.count("*").alias("documents"), F.sum("tokens").alias("tokens"))
            .orderBy("source", "shard").collect()
        )
        dtype = dtype_for_vocab(tok["vocab_size"]).name
        entries = [ShardEntry(path=r["shard"], source=r["source"], documents=r["documents"],
                              tokens=int(r["tokens"]), dtype=dtype) for r in per_shard]
        manifest, warnings = build_manifest(
            entries,
            tokenizer={"path": f"../../{TOKENIZER_DIR}/{tok['path']}", "sha256": tok["sha256"],
                       "vocab_size": tok["vocab_size"], "eos_id": tok["eos_id"]},
            weights=cfg.weights,
            inputs={source_table: ctx.input_version},
            seed=cfg.seed,
        )
        for w in warnings:
            log.warning("tokenize_shards: %s", w)
        if warnings:
            shares = ",".join(f"{k}:{v:.3f}" for k, v in manifest.weights.items())
            ctx.notes.append(f"weights={shares}({len(warnings)} warnings)")
        write_manifest(manifest, out_dir / MANIFEST)
    # Write, validate, promote: the trainer reads only the lake-level manifest, so shards
    # that fail their gate never reach it.
    if not gate_shards(ctx, out_dir / MANIFEST):
        ctx.output_table = f"{SHARDS_DIR}/{ctx.run_id}/{MANIFEST}"
        return
    with ctx.step("promote the manifest"):
        # The lake-level manifest names shards relative to itself.
        for e in manifest.shards:
            e.path = f"{ctx.run_id}/{e.path}"
        manifest.tokenizer["path"] = f"../{TOKENIZER_DIR}/{tok['path']}"
        write_manifest(manifest, out_dir.parent / MANIFEST)
    ctx.rows_out = sum(e.documents for e in entries)
    ctx.rows_in = ctx.rows_out + ctx.counts[QUARANTINED]
    ctx.output_table = f"{SHARDS_DIR}/{MANIFEST}"
    for source, info in manifest.sources.items():
        ctx.counts[f"{source}_tokens"] = int(info["tokens"])
        ctx.counts[f"{source}_documents"] = int(info["documents"])
    ctx.counts["shards"] = len(entries)


def gate_shards(ctx: JobContext, run_manifest: Path) -> bool:
    """The shard_docs suite on this run's rows, plus the shards against the run's manifest
    (counts per shard, .bin sizes). Recorded on the run like any gate."""
    from pyspark.sql import functions as F

    from tokenmill.jobs.runtime import gates_on, run_output_gate

    if not gates_on(ctx):
        return True
    from tokenmill.jobs.gates import check_shards_against_manifest

    rows = ctx.spark.read.format("delta").load(ctx.path(SHARD_DOCS)).where(
        F.col("run_id") == ctx.run_id)
    passed = run_output_gate(ctx, SHARD_DOCS.name, rows)
    with ctx.step("gate: shards against the manifest"):
        problems = check_shards_against_manifest(run_manifest, rows)
    if problems:
        ctx.gate_status = "failed"
        ctx.gate_summary = "\n".join(filter(None, [ctx.gate_summary, *problems]))
        ctx.counts["gate_failures"] += len(problems)
    return passed and not problems


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Encode the clean table into token shards and write the manifest.")
    parser.add_argument("--input-table", help=f"table to encode (default: first of {INPUTS})")
    return run_job(JOB, parser, tokenize_shards, argv)


if __name__ == "__main__":
    raise SystemExit(main())

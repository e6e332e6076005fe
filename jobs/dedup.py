"""Dedup: exact and MinHash-LSH near-duplicate removal, as Spark joins.

    spark-submit jobs/dedup.py --root lake                 # full: the whole input table
    spark-submit jobs/dedup.py --root lake --incremental   # only documents not seen before

Steps: boilerplate lines out → exact duplicates (hash of the normalised text) → MinHash
signatures → band keys → star edges → verified edges → connected components → one document
kept per cluster. Outputs: `deduped` (kept documents), `dup_clusters` (audit), `rejections`
(`exact_duplicate` / `near_duplicate` with the representative's id), `lsh_index` (signatures
and band hashes of kept documents, for the next incremental run).

Representative rule: a cluster keeps its smallest doc_id (stable across reruns and input
order) — except that a document kept by an earlier run is never dropped: a cluster that
contains one keeps its smallest previously kept doc_id, and drops every new member.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tokenmill.dedup.boilerplate import remove_boilerplate
from tokenmill.dedup.components import connected_components
from tokenmill.dedup.lsh import (
    MinHashParams,
    band_keys,
    minhash_signatures,
    star_edges,
    verify_edges,
)
from tokenmill.jobs.runtime import (
    JobContext,
    delete_path,
    delta_exists,
    job_parser,
    pick_input_table,
    run_job,
)
from tokenmill.schemas.tables import (
    DEDUP_EXTRA_COLUMNS,
    DEDUPED_NAME,
    DOCS,
    DUP_CLUSTERS,
    LSH_INDEX,
    REJECTIONS,
    Table,
)

JOB = "dedup"
# Newest first: dedup reads the latest cleaned table that exists.
INPUT_CANDIDATES = ("quality", "urlfilter", "langid", DOCS.name)


def pick_input(ctx: JobContext) -> Table:
    name = pick_input_table(ctx, INPUT_CANDIDATES)
    return Table(name=name, schema=None, version=0, key=("doc_id",), description="")


def output_table(input_df: DataFrame) -> Table:
    from pyspark.sql.types import StructField, StructType

    fields = [f for f in input_df.schema.fields if f.name not in dict(DEDUP_EXTRA_COLUMNS)]
    fields += [StructField(n, t, True) for n, t in DEDUP_EXTRA_COLUMNS]
    return Table(
        name=DEDUPED_NAME,
        schema=StructType(fields),
        version=1,
        key=("doc_id",),
        description="One document per duplicate cluster, boilerplate lines removed.",
    )


def previously_seen(ctx: JobContext) -> tuple[DataFrame | None, DataFrame | None]:
    """(lsh_index, ids this stage already rejected) of earlier runs, if any."""
    spark = ctx.spark
    index = None
    if delta_exists(spark, ctx.path(LSH_INDEX)):
        index = spark.read.format("delta").load(ctx.path(LSH_INDEX))
    rejected = None
    if delta_exists(spark, ctx.path(REJECTIONS)):
        rejected = (
            spark.read.format("delta").load(ctx.path(REJECTIONS))
            .where(F.col("stage") == JOB).select("doc_id")
        )
    return index, rejected


def cluster_edges(
    ctx: JobContext, new_signed: DataFrame, old_index: DataFrame | None, params: MinHashParams
) -> DataFrame:
    """All verified edges: exact duplicates (same text hash), new↔new LSH candidates and
    new→old LSH candidates, as (src, dst, similarity)."""
    cfg = ctx.config.dedup
    columns = ["doc_id", "text_hash", "signature", "band_hashes", "shingles"]
    nodes = new_signed.select(*columns)
    if old_index is not None:
        nodes = nodes.unionByName(old_index.select(*columns))

    # Exact duplicates: every member → the smallest doc_id with the same hash.
    heads = nodes.groupBy("text_hash").agg(F.min("doc_id").alias("dst"), F.count("*").alias("n"))
    exact = (
        nodes.join(heads.where("n > 1"), "text_hash")
        .where(F.col("doc_id") != F.col("dst"))
        .select(F.col("doc_id").alias("src"), "dst", F.lit(1.0).alias("similarity"))
    )
    # Only one document per text hash takes part in LSH: the rest are already linked.
    unique = nodes.join(heads.select(F.col("dst").alias("doc_id")), "doc_id", "left_semi")
    keys = band_keys(unique)
    if old_index is not None:
        new_ids = new_signed.select("doc_id")
        # Keys of old documents matter only where a new document shares the bucket: the
        # semi-join keeps the band join proportional to the new data's buckets.
        new_keys = keys.join(new_ids, "doc_id", "left_semi")
        keys = keys.join(
            new_keys.select("band", "band_hash").distinct(), ["band", "band_hash"], "left_semi"
        )
    candidates, giant = star_edges(keys, cfg.max_bucket_size)
    with ctx.step("count giant buckets"):
        ctx.counts["giant_buckets"] = giant.count()
    verified = verify_edges(
        candidates,
        unique.select("doc_id", "signature", "shingles"),
        cfg.threshold,
        cfg.num_perm,
        exact=cfg.verify == "exact",
    )
    return exact.unionByName(verified)


def dedup(ctx: JobContext) -> None:
    spark = ctx.spark
    cfg = ctx.config.dedup
    incremental = bool(ctx.args.incremental)
    table = pick_input(ctx)
    source = ctx.read_table(table)
    out = output_table(source)
    delete_path(spark, ctx.staging_path())

    old_index, old_rejected = previously_seen(ctx) if incremental else (None, None)
    docs = source
    if old_index is not None:
        docs = docs.join(old_index.select("doc_id"), "doc_id", "left_anti")
    if old_rejected is not None:
        docs = docs.join(old_rejected, "doc_id", "left_anti")

    # 1. Boilerplate lines out, then the texts are fixed for this run: stage them once.
    if cfg.boilerplate:
        docs = remove_boilerplate(docs, cfg.boilerplate_min_docs, cfg.boilerplate_min_chars)
    else:
        docs = docs.withColumn("boilerplate_lines", F.lit(0))
    with ctx.step("remove boilerplate lines"):
        docs = ctx.stage(docs, "docs")

    # 2. Signatures (the Python part), staged so later joins never recompute them.
    params = MinHashParams(cfg.ngram, cfg.num_perm, cfg.bands, cfg.rows, cfg.seed,
                           exact_shingles=cfg.verify == "exact")
    with ctx.step("minhash signatures"):
        signed = ctx.stage(
            minhash_signatures(docs.where(F.length(F.trim("text")) > 0), params), "signed"
        )

    # 3. Verified edges → clusters.
    edges = cluster_edges(ctx, signed, old_index, params)
    with ctx.step("band join and verification"):
        edges = ctx.stage(edges, "edges")
    with ctx.step("connected components"):
        result = connected_components(
            edges.select("src", "dst"),
            checkpoint_dir=ctx.staging_path("checkpoints"),
            checkpoint_every=cfg.checkpoint_every,
        )
        components = ctx.stage(result.components, "components")
        ctx.notes.append(f"cc_iterations={result.iterations}")

    # 4. Representatives: a previously kept document wins, then the smallest doc_id.
    if old_index is not None:
        old_ids = old_index.select(F.col("doc_id").alias("node"), F.lit(True).alias("old"))
        components = components.join(old_ids, "node", "left")
    else:
        components = components.withColumn("old", F.lit(None).cast("boolean"))
    reps = components.groupBy("component").agg(
        F.coalesce(F.min(F.when(F.col("old"), F.col("node"))), F.min("node")).alias(
            "representative"),
        F.count("*").alias("cluster_size"),
    )
    hashes = signed.select("doc_id", "text_hash")
    if old_index is not None:
        hashes = hashes.unionByName(old_index.select("doc_id", "text_hash"))
    sims = edges.select(F.col("src").alias("node"), "similarity").groupBy("node").agg(
        F.max("similarity").alias("similarity"))
    members = (
        components.join(reps, "component")
        .join(hashes.withColumnRenamed("doc_id", "node"), "node")
        .join(
            hashes.select(F.col("doc_id").alias("representative"),
                          F.col("text_hash").alias("rep_hash")),
            "representative",
        )
        .join(sims, "node", "left")
        .select(
            F.col("node").alias("doc_id"),
            F.col("representative").alias("cluster_id"),
            "representative",
            "cluster_size",
            F.when(F.col("node") == F.col("representative"), "representative")
            # Kept by an earlier run and never dropped, though now linked to another cluster.
            .when(F.col("old"), "kept_earlier")
            .when(F.col("text_hash") == F.col("rep_hash"), "exact")
            .otherwise("near").alias("kind"),
            F.format_number(F.col("similarity"), 4).alias("similarity"),
            F.lit(ctx.run_id).alias("run_id"),
            F.coalesce("old", F.lit(False)).alias("old"),
        )
    )
    with ctx.step("choose representatives"):
        members = ctx.stage(members, "members")
    dropped = members.where("kind in ('exact', 'near')")

    # 5. Outputs: rejections first, then the kept table and the index (see ingest for why
    # the order makes kill-and-rerun safe: rejected ids are excluded on the rerun).
    empties = docs.where(F.length(F.trim("text")) == 0)
    with ctx.step("write rejections"):
        rejects = dropped.join(docs.select(F.col("doc_id"), "url"), "doc_id").select(
            "doc_id",
            "url",
            F.when(F.col("kind") == "exact", "exact_duplicate").otherwise("near_duplicate")
            .alias("reason"),
            F.create_map(
                F.lit("representative"), F.col("representative"),
                F.lit("similarity"), F.col("similarity"),
            ).alias("signals"),
            F.lit(None).cast("string").alias("source_path"),
            F.lit(None).cast("long").alias("record_offset"),
        )
        boiler = empties.select(
            "doc_id", "url", F.lit("boilerplate_only").alias("reason"),
            F.create_map(F.lit("boilerplate_lines"), F.col("boilerplate_lines").cast("string"))
            .alias("signals"),
            F.lit(None).cast("string").alias("source_path"),
            F.lit(None).cast("long").alias("record_offset"),
        )
        ctx.add_rejections(rejects.unionByName(boiler), replace_stage=not incremental)

    kept = docs.join(dropped.select("doc_id"), "doc_id", "left_anti").join(
        empties.select("doc_id"), "doc_id", "left_anti")
    with ctx.step("write deduped table"):
        ctx.output_table = DEDUPED_NAME
        if incremental:
            ctx.output_version = ctx.merge(out, kept)
        else:
            ctx.output_version = ctx.overwrite(out, kept)
    with ctx.step("write dup_clusters"):
        clusters = members.drop("old")
        if incremental:
            ctx.merge(DUP_CLUSTERS, clusters, update=True)
        else:
            ctx.overwrite(DUP_CLUSTERS, clusters)
    with ctx.step("write lsh_index"):
        index_rows = signed.join(kept.select("doc_id"), "doc_id", "left_semi").select(
            "doc_id", "text_hash", "signature", "band_hashes", "shingles",
            F.lit(ctx.run_id).alias("run_id"),
        )
        if incremental:
            ctx.merge(LSH_INDEX, index_rows)
        else:
            ctx.overwrite(LSH_INDEX, index_rows)

    with ctx.step("count outcomes"):
        counts = dropped.groupBy("kind").count().collect()
        for r in counts:
            ctx.counts["exact_duplicate" if r["kind"] == "exact" else "near_duplicate"] += r[
                "count"]
        ctx.counts["boilerplate_only"] += empties.count()
        ctx.rows_in = docs.count()
        ctx.rows_out = ctx.rows_in - sum(r["count"] for r in counts) - ctx.counts[
            "boilerplate_only"]
        ctx.counts["clusters"] = members.where("kind = 'representative'").count()
    ctx.notes.append("mode=incremental" if incremental else "mode=full")
    delete_path(spark, ctx.staging_path())


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Remove exact and near-duplicate documents (MinHash LSH).")
    parser.add_argument(
        "--input-table",
        help=f"table to dedup (default: the first that exists of {', '.join(INPUT_CANDIDATES)})",
    )
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="only documents not seen by an earlier run, joined against lsh_index",
    )
    return run_job(JOB, parser, dedup, argv)


if __name__ == "__main__":
    raise SystemExit(main())

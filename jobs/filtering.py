"""The filter-stage contract shared by langid, urlfilter and quality: signals, then a predicate.

1. The input table (pinned version) is compared with `<stage>_signals`: only documents whose
   text or url changed, that are new, or whose signals were computed with other models, lists
   or parameters (`signals_key`) get their signals computed, in one Arrow-batched Python pass.
   The rest are reused. So a rerun on the same input computes nothing, and a nightly run
   computes the new documents only.
2. The predicate, built from config as Spark column expressions, gives each document the
   reason of the first rule it fails, or none. Changing a threshold re-runs this step only.
3. Kept rows (input columns + signal columns) replace the stage's table in one Delta commit;
   dropped rows replace the stage's slice of `rejections`, with every signal value, so
   "why was this page dropped?" is one query.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tokenmill.jobs.runtime import (
    JobContext,
    JobError,
    delete_path,
    delta_exists,
    ensure_table,
    pick_input_table,
)
from tokenmill.schemas.tables import Table, signals_table

Rule = tuple[str, Any]  # (reason, Spark Column that is true when the document fails)


@dataclass(frozen=True)
class FilterStage:
    name: str  # the job and its output table
    inputs: tuple[str, ...]  # candidate input tables, preferred first
    signals: tuple[tuple[str, Any], ...]  # (column, Spark type) of the stage's signals
    description: str
    rewrites: tuple[tuple[str, Any], ...] = ()  # input columns the signal pass replaces
    derived: tuple[tuple[str, Any], ...] = ()  # columns added at predicate time
    output: str = ""  # output table when it is not named after the stage

    @property
    def output_name(self) -> str:
        return self.output or self.name

    @property
    def signals_table(self) -> Table:
        return signals_table(self.name, self.signals, self.rewrites)


def signals_key(**parts: Any) -> str:
    """Fingerprint of everything a stage's signals depend on besides the document itself."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def arrow_batch(columns: dict[str, list[Any]], schema: Any) -> Any:
    """A record batch in the declared Spark schema's Arrow types (mapInArrow checks them)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    arrays = [pa.array(columns[f.name], type=f.type) for f in arrow_schema]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def map_rows(
    fn: Callable[[dict[str, list[Any]]], dict[str, list[Any]]], schema: Any,
    passthrough: tuple[str, ...] = (),
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """mapInArrow body: each Arrow batch becomes a dict of Python lists and `fn` returns the
    batch's output columns (models are loaded by `fn` once per worker process); the
    `passthrough` columns are copied to the output unchanged."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            cols = batch.to_pydict()
            kept = {c: cols.pop(c) for c in passthrough}
            out = fn(cols)
            out.update(kept)
            yield arrow_batch(out, schema)

    return run


def _struct(fields: Iterable[tuple[str, Any]]) -> Any:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(n, t, True) for n, t in fields])


def predicate(rules: list[Rule]) -> Any:
    """The reason of the first failing rule, or null. A null signal fails no rule."""
    from pyspark.sql import functions as F

    expr = None
    for reason, failed in rules:
        cond = F.coalesce(failed, F.lit(False))
        expr = F.when(cond, F.lit(reason)) if expr is None else expr.when(cond, F.lit(reason))
    return F.lit(None).cast("string") if expr is None else expr.otherwise(F.lit(None))


def threshold_rules(spec: Iterable[tuple[str, str, str, Any]]) -> list[Rule]:
    """(reason, signal column, op, threshold) → rules; a None threshold disables the rule.
    ops: lt (fail below), gt (fail above), flag (fail when the signal is non-zero and the
    threshold is True)."""
    from pyspark.sql import functions as F

    rules = []
    for reason, signal, op, threshold in spec:
        if threshold is None or (op == "flag" and not threshold):
            continue
        col = F.col(signal)
        if op == "lt":
            rules.append((reason, col < F.lit(threshold)))
        elif op == "gt":
            rules.append((reason, col > F.lit(threshold)))
        elif op == "flag":
            rules.append((reason, col != F.lit(0)))
        else:
            raise ValueError(f"unknown rule op {op!r} for {reason}")
    return rules


def run_filter_stage(
    ctx: JobContext,
    stage: FilterStage,
    *,
    key: str,
    compute_columns: tuple[str, ...],
    compute: Callable[[dict[str, list[Any]]], dict[str, list[Any]]],
    rules: list[Rule],
    derive: Callable[[Any], Any] | None = None,
    optional: tuple[str, ...] = (),
) -> None:
    """Runs one filter stage end to end (see the module docstring).

    compute_columns: input columns the Python pass needs.
    compute: batch of those columns → rewrites + signals, as Python lists.
    rules: ordered (reason, failed) rules built from config.
    derive: optional joined frame → joined frame with `stage.derived` columns.
    optional: compute columns an input may lack (filled with nulls, e.g. `lang` when the
    quality stage reads `docs` directly).
    """
    from pyspark.sql import functions as F

    spark = ctx.spark
    source = pick_input_table(ctx, stage.inputs)
    sig_table = stage.signals_table
    sig_path = ctx.path(sig_table)
    inp = ctx.read_table(Table(source, None, 0, ("doc_id",), ""))
    for name in optional:
        if name not in inp.columns:
            inp = inp.withColumn(name, F.lit(None).cast("string"))
    missing = [c for c in ("doc_id", "text", "url", *compute_columns) if c not in inp.columns]
    if missing:
        raise JobError(f"input table {source!r} lacks column(s) {', '.join(missing)}")
    # Signal columns of an earlier run of this stage cannot be in its own input, but a user may
    # point --input-table at a table that has them: the fresh ones win.
    own = {n for n, _ in stage.signals} | {n for n, _ in stage.derived}
    inp = inp.drop(*[c for c in inp.columns if c in own])
    inp = inp.withColumn("_input_hash", F.xxhash64("text", "url").cast("string"))

    with ctx.step("find documents without current signals"):
        todo = inp
        if delta_exists(spark, sig_path):
            have = (
                spark.read.format("delta").load(sig_path)
                .where(F.col("signals_key") == key)
                .select("doc_id", F.col("input_hash").alias("_input_hash"))
            )
            todo = inp.join(have, ["doc_id", "_input_hash"], "left_anti")
        todo = todo.select(*dict.fromkeys(("doc_id", "_input_hash", *compute_columns)))
        n_todo = todo.count()
        ctx.rows_in = inp.count()
    ctx.counts["signals_computed"] = n_todo
    ctx.counts["signals_reused"] = ctx.rows_in - n_todo

    out_schema = _struct(
        (("doc_id", _string()), ("_input_hash", _string()), *stage.rewrites, *stage.signals)
    )
    if n_todo:
        with ctx.step("compute signals"):
            computed = todo.mapInArrow(
                map_rows(compute, out_schema, ("doc_id", "_input_hash")), out_schema
            )
            rows = (
                computed.withColumnRenamed("_input_hash", "input_hash")
                .withColumn("signals_key", F.lit(key))
                .withColumn("run_id", F.lit(ctx.run_id))
            )
            staged = ctx.stage(rows, "signals")
        with ctx.step("store signals"):
            ctx.merge(sig_table, staged, update=True)

    with ctx.step("apply predicate"):
        ensure_table(spark, sig_path, sig_table)  # an empty input computes nothing
        sig = (
            spark.read.format("delta").load(sig_path)
            .where(F.col("signals_key") == key)
            .select("doc_id", F.col("input_hash").alias("_input_hash"),
                    *[n for n, _ in stage.rewrites], *[n for n, _ in stage.signals])
        )
        joined = inp.drop(*[n for n, _ in stage.rewrites]).join(sig, ["doc_id", "_input_hash"])
        if derive is not None:
            joined = derive(joined)
        decided = ctx.stage(joined.withColumn("_reason", predicate(rules)), "decided")

    output_columns = [c for c in decided.columns if c not in ("_reason", "_input_hash")]
    kept = decided.where(F.col("_reason").isNull()).select(*output_columns)
    output = Table(
        name=stage.output_name,
        schema=kept.schema,
        version=1,
        key=("doc_id",),
        description=stage.description,
    )
    with ctx.step("write kept documents"):
        ctx.output_table = stage.output_name
        ctx.output_version = ctx.overwrite(output, kept)

    signal_names = [n for n, _ in (*stage.signals, *stage.derived)]
    signal_map = F.create_map(
        *[x for n in signal_names for x in (F.lit(n), F.col(n).cast("string"))]
    )
    dropped = decided.where(F.col("_reason").isNotNull()).select(
        "doc_id",
        "url",
        F.col("_reason").alias("reason"),
        signal_map.alias("signals"),
        (F.col("warc_path") if "warc_path" in decided.columns else F.lit(None))
        .cast("string").alias("source_path"),
        (F.col("record_offset") if "record_offset" in decided.columns else F.lit(None))
        .cast("long").alias("record_offset"),
    )
    with ctx.step("write rejections"):
        ctx.add_rejections(dropped, replace_stage=True)

    with ctx.step("count outcomes"):
        for r in decided.groupBy("_reason").count().collect():
            if r["_reason"] is None:
                ctx.rows_out = r["count"]
            else:
                ctx.counts[r["_reason"]] += r["count"]
        ctx.rows_out = ctx.rows_out or 0
    ctx.notes.append(f"input={source}")
    delete_path(spark, ctx.staging_path())


def _string() -> Any:
    from pyspark.sql.types import StringType

    return StringType()

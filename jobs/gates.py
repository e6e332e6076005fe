"""Data-quality gates: a table's expectation suite (schemas/expectations.py) run with Great
Expectations on the DataFrame of the version a job has just written, before the next stage
may read it.

    result = run_gate(spark, "langid", df, config, docs_dir, run_id)
    if not result.passed:
        raise JobError(result.summary())

Great Expectations runs in an ephemeral context built per call: a Spark data source over the
given DataFrame, the suite, a validation definition run by a checkpoint, then the HTML Data
Docs of that run built into `docs_dir`. The suites and validation results behind the Data Docs
are kept as JSON under `docs_dir/.gx/`, so one folder accumulates every gate run and its
index.html lists them all.

`check_shards_against_manifest` is the shards' gate that Great Expectations cannot express:
shard_docs against manifest.json and the .bin files on disk.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tokenmill.schemas.expectations import (
    DERIVED_COLUMNS,
    EXACT_HASH,
    expectations_for,
    suite_name,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tokenmill.jobs.config import PipelineConfig

DATA_DOCS_SITE = "tokenmill"
STORES_DIR = ".gx"  # under docs_dir: the suites and results the Data Docs are built from
# Unexpected values fetched per failed expectation (GX collects them to the driver): a few
# are enough to read a failure, and texts can be a megabyte each.
SHOWN_VALUES = 5
QUICK = {"result_format": "BOOLEAN_ONLY"}
# BASIC: counts and a few unexpected values. SUMMARY would also group the unexpected values
# (a shuffle of whole texts) for a table nobody reads in a log line.
DETAILED = {"result_format": "BASIC", "partial_unexpected_count": SHOWN_VALUES}
# Values of these columns are never printed: whole documents, and in `clean` the personal
# data that masking missed (the job logs must not carry it).
HIDDEN_VALUE_COLUMNS = frozenset({"text"})


@dataclass
class GateResult:
    table: str
    passed: bool
    failures: list[str] = field(default_factory=list)  # one readable line per failure
    evaluated: int = 0  # expectations evaluated
    docs_path: str | None = None  # the Data Docs' index.html, when written
    rows: int | None = None  # rows validated
    seconds: float = 0.0

    def summary(self) -> str:
        rows = f" on {self.rows} rows" if self.rows is not None else ""
        if self.evaluated == 0 and self.passed:
            head = f"gate {self.table}: skipped (gates.enabled is false)"
        elif self.passed:
            head = f"gate {self.table}: passed {self.evaluated} expectations{rows}"
        else:
            head = (f"gate {self.table}: FAILED {len(self.failures)} of {self.evaluated} "
                    f"expectations{rows}")
        lines = [f"{head} ({self.seconds:.1f}s)"]
        lines += [f"  - {f}" for f in self.failures]
        if self.docs_path:
            lines.append(f"  Data Docs: {self.docs_path}")
        return "\n".join(lines)


def run_gate(
    spark: SparkSession,
    table_name: str,
    df: DataFrame,
    config: PipelineConfig,
    docs_dir: str | None,
    run_id: str,
) -> GateResult:
    """Validates `df` (the table version just written) against the table's suite and, with
    gates.data_docs and a `docs_dir`, writes the Data Docs there. Raises ValueError for a
    table without a suite."""
    expectations = expectations_for(table_name, config)
    if not config.gates.enabled:
        return GateResult(table=table_name, passed=True)
    if docs_dir and "://" in docs_dir:
        raise ValueError(f"Data Docs are written to a local folder, not {docs_dir}")
    t0 = time.monotonic()
    frame = with_derived_columns(table_name, df)
    docs = Path(docs_dir).expanduser().resolve() if docs_dir and config.gates.data_docs else None
    # The gate's Spark jobs read as such in the Spark UI; the caller's description comes back.
    sc = spark.sparkContext
    description = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"gate {table_name}: {suite_name(table_name)}")
    # Every expectation reads the frame again: persist it once (and only for the gate).
    was_cached = frame.is_cached
    if not was_cached:
        frame.persist()
    try:
        rows = frame.count()
        validation = _validate(frame, table_name, expectations, docs, run_id)
    finally:
        if not was_cached:
            frame.unpersist()
        sc.setJobDescription(description)  # type: ignore[arg-type]  # None clears it
    failures = [failure_line(table_name, r) for r in validation.results if not r.success]
    return GateResult(
        table=table_name,
        passed=bool(validation.success),
        failures=failures,
        evaluated=int(validation.statistics["evaluated_expectations"]),
        docs_path=str(docs / "index.html") if docs else None,
        rows=rows,
        seconds=time.monotonic() - t0,
    )


# --------------------------------------------------------------------------- derived columns


def with_derived_columns(table: str, df: DataFrame) -> DataFrame:
    """`df` plus the columns the table's suite checks but the table does not store."""
    for column in DERIVED_COLUMNS.get(table, ()):
        if column in df.columns:
            continue
        if column == EXACT_HASH:
            df = df.withColumn(EXACT_HASH, exact_hash(df["text"]))
        else:
            raise ValueError(f"{table}: no way to derive column {column!r}")
    return df


def exact_hash(text: Column) -> Column:
    """Dedup's exact key (udfs.text.text_hash: sha1 of FineWeb's normalisation), per row."""
    from pyspark.sql import functions as F

    @F.pandas_udf("string")
    def hashes(texts: pd.Series) -> pd.Series:
        from tokenmill.udfs.text import text_hash

        return pd.Series([None if t is None else text_hash(t) for t in texts], dtype=object)

    return hashes(text)


# --------------------------------------------------------------------------- Great Expectations


def _validate(
    frame: DataFrame, table: str, expectations: list[Any], docs: Path | None, run_id: str
) -> Any:
    """The suite's ExpectationSuiteValidationResult on `frame`; with `docs`, its Data Docs.

    Pass/fail first: without unexpected values to fetch, a suite takes half the Spark jobs.
    Only a failure pays for a second run with the counts and samples its report shows (that
    run's result replaces the first in the store, so the Data Docs show one per gate)."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
    )

    context = _context(docs)
    batch = (
        context.data_sources.add_spark(name="tokenmill", persist=False)  # run_gate persists
        .add_dataframe_asset(name=table)
        .add_batch_definition_whole_dataframe("table version")
    )
    suite = context.suites.add_or_update(
        # An expectation belongs to one suite: this run's suite gets copies.
        gx.ExpectationSuite(name=suite_name(table),
                            expectations=[copy.copy(e) for e in expectations])
    )
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=table, data=batch, suite=suite)
    )

    def run(result_format: dict[str, Any]) -> tuple[Any, Any]:
        checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
            name=f"gate {table}", validation_definitions=[definition],
            result_format=result_format,
        ))
        result = checkpoint.run(
            batch_parameters={"dataframe": frame},
            run_id=RunIdentifier(run_name=run_id, run_time=datetime.now(UTC)),
        )
        return next(iter(result.run_results.items()))

    key, validation = run(QUICK)
    if not validation.success:
        if docs is not None:
            context.validation_results_store.remove_key(key)
        key, validation = run(DETAILED)
    if docs is not None:
        context.build_data_docs(
            site_names=[DATA_DOCS_SITE],
            resource_identifiers=[key, ExpectationSuiteIdentifier(name=suite.name)],
        )
    return validation


def _context(docs: Path | None) -> Any:
    """An ephemeral GX context, quiet: no progress bars, no analytics. With `docs`, the
    suites and validation results are files under docs/.gx (the Data Docs index lists what
    those stores hold, so a shared folder keeps every earlier run) and the site is `docs`."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        analytics_enabled=False,
    )
    if docs is not None:
        for store, folder in (("expectations_store", "expectations"),
                              ("validation_results_store", "validations")):
            config.stores[store]["store_backend"] = {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(docs / STORES_DIR / folder),
            }
        config.data_docs_sites = {
            DATA_DOCS_SITE: {
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        }
    return gx.get_context(mode="ephemeral", project_config=config)


# --------------------------------------------------------------------------- failure lines


def failure_line(table: str, result: Any) -> str:
    """One line a person can act on, from a failed ExpectationValidationResult."""
    config = result.expectation_config
    what = config.description or config.type
    error = _exception_message(result.exception_info)
    if error:
        return f"{table}: {what} could not be evaluated: {error}"
    res = dict(result.result or {})
    if "unexpected_count" in res:
        count, total = res["unexpected_count"], res["element_count"]
        line = f"{table}: {what} failed for {count} of {total} rows"
        if config.kwargs.get("mostly", 1) < 1:
            line += f" ({res['unexpected_percent']:.2f}%)"
        shown = _shown_values(config, res.get("partial_unexpected_list") or [], count)
        return f"{line} ({shown})" if shown else line
    missing = res.get("details", {}).get("mismatched", {}).get("missing")
    if missing:
        return f"{table}: {what} failed: missing {', '.join(missing)}"
    return f"{table}: {what} failed (observed: {res.get('observed_value')!r})"


def _shown_values(config: Any, values: list[Any], count: int) -> str:
    column = config.kwargs.get("column")
    more = ", …" if count > min(len(values), 3) else ""
    if column in HIDDEN_VALUE_COLUMNS:
        if config.type == "expect_column_value_lengths_to_be_between":
            lengths = ", ".join(str(len(v)) for v in values[:3])
            return f"lengths: {lengths}{more}" if lengths else ""
        return ""
    if not values:
        return ""
    return "unexpected: " + ", ".join(_show(v) for v in values[:3]) + more


def _show(value: Any, limit: int = 40) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "(" + ", ".join(_show(v, limit) for v in value.values()) + ")"
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exception_message(info: Any) -> str | None:
    """GX reports a failed metric either flat or keyed by metric id."""
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "error")
    for inner in info.values():
        if isinstance(inner, dict) and inner.get("raised_exception"):
            return str(inner.get("exception_message") or "error")
    return None


# --------------------------------------------------------------------------- shards


def check_shards_against_manifest(
    manifest_path: str | Path, shard_docs: DataFrame, shards_dir: str | Path | None = None
) -> list[str]:
    """Problems between a manifest, `shard_docs` and the shard files (empty: they agree).
    Per shard of the manifest: documents and tokens in shard_docs equal the manifest's, and
    the .bin holds tokens × the dtype's size in bytes. Rows of shard_docs from the manifest's
    run(s) naming a shard the manifest lacks are problems too.

    shard_docs names a shard relative to the lake's `shards/` folder; `shards_dir` defaults
    to the nearest folder of that name above the manifest (else the manifest's folder), so
    both the run's manifest and the lake-level one work. Local lake roots only: the shard
    files are read from the local disk, as tokenize_shards writes them."""
    import numpy as np
    from pyspark.sql import functions as F

    from tokenmill.tokenize.manifest import read_manifest, shard_prefix

    raw = str(manifest_path)
    if "://" in raw and not raw.startswith("file:"):
        raise ValueError(f"{raw}: shard files are checked on a local lake root only")
    path = Path(raw.removeprefix("file:")).resolve()
    manifest = read_manifest(path, check_files=False)
    base = Path(shards_dir).resolve() if shards_dir is not None else _shards_folder(path)

    entries = {}
    for entry in manifest.shards:
        prefix = shard_prefix(path, entry)
        key = prefix.relative_to(base).as_posix() if prefix.is_relative_to(base) else entry.path
        entries[key] = (entry, prefix)
    if not entries:
        return []

    wanted = F.broadcast(shard_docs.sparkSession.createDataFrame(
        [(k,) for k in sorted(entries)], "shard string"))
    counted = {
        r["shard"]: r
        for r in shard_docs.join(wanted, "shard", "left_semi")
        .groupBy("shard")
        .agg(F.count("*").alias("documents"), F.sum("tokens").alias("tokens"),
             F.collect_set("run_id").alias("runs"))
        .collect()
    }

    problems: list[str] = []
    runs: set[str] = set()
    for key, (entry, prefix) in sorted(entries.items()):
        row = counted.get(key)
        if row is None:
            problems.append(f"shard {key}: in the manifest ({entry.documents} documents) "
                            "but not in shard_docs")
        else:
            runs.update(row["runs"])
            if row["documents"] != entry.documents:
                problems.append(f"shard {key}: shard_docs has {row['documents']} documents, "
                                f"the manifest {entry.documents}")
            if int(row["tokens"]) != entry.tokens:
                problems.append(f"shard {key}: shard_docs has {row['tokens']} tokens, "
                                f"the manifest {entry.tokens}")
        bin_file = Path(f"{prefix}.bin")
        expected = entry.tokens * np.dtype(entry.dtype).itemsize
        if not bin_file.is_file():
            problems.append(f"shard {key}: {bin_file} is missing")
        elif bin_file.stat().st_size != expected:
            problems.append(f"shard {key}: .bin holds {bin_file.stat().st_size} bytes, "
                            f"{entry.tokens} tokens × {np.dtype(entry.dtype).itemsize} = "
                            f"{expected} expected")
    if runs:
        extra = (
            shard_docs.where(F.col("run_id").isin(sorted(runs)))
            .join(wanted, "shard", "left_anti")
            .select("shard").distinct().orderBy("shard").limit(20).collect()
        )
        problems += [f"shard {r['shard']}: in shard_docs but not in the manifest" for r in extra]
    return problems


def _shards_folder(manifest: Path) -> Path:
    from tokenmill.jobs.tokenize_shards import SHARDS_DIR  # here: that job may import gates

    for folder in manifest.parents:
        if folder.name == SHARDS_DIR:
            return folder
    return manifest.parent

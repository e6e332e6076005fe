"""The runtime every job shares: CLI, config, SparkSession with Delta, lake paths, idempotent
Delta writes, the `runs` ledger, `rejections`, Spark job groups and the one-line summary.

A job file only parses its own input arguments and describes its steps; everything a data
engineer expects of every job (clear errors, no half-written tables, counts they can see)
lives here once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenmill.jobs.config import ConfigError, PipelineConfig, load_config
from tokenmill.schemas.tables import REJECTIONS, RUNS, Table

log = logging.getLogger("tokenmill")

REPO_ROOT = Path(__file__).resolve().parents[1]
# Jars copied by `make jars` (infra/jvm/pom.xml). On a cluster they come from --packages.
JARS_DIR = Path(os.environ.get("TOKENMILL_JARS_DIR", REPO_ROOT / ".jars"))
DEFAULT_ROOT = os.environ.get("TOKENMILL_ROOT", "lake")
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
# Test hook: exit abruptly (like kill -9) right after the named step, to prove that a job
# killed at any point leaves no half-written table and that a rerun completes the work.
CRASH_AFTER_STEP = "TOKENMILL_CRASH_AFTER_STEP"
GATES_ENV = "TOKENMILL_GATES"

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_GATE = 0, 1, 2, 3, 4


class JobError(RuntimeError):
    """A failure the user can act on (bad input path, missing table …): printed without a
    stack trace."""


# --------------------------------------------------------------------------- session


def build_session(app_name: str, config: PipelineConfig, event_log_dir: str | None = None) -> Any:
    """A SparkSession with Delta. Settings given to spark-submit (--master, --conf,
    --packages) win; without a master it is the embedded default, local[*].

    With `event_log_dir` (jobs pass `<root>/_spark_events`), Spark's event log is on, so the
    Spark History Server (`make history`) shows every past run; `spark.eventLog.enabled:
    "false"` in `spark.conf` turns it off."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    given = SparkConf()  # what spark-submit (or spark-defaults.conf) already set
    builder = SparkSession.builder.appName(app_name)
    master = given.get("spark.master", None) or os.environ.get("TOKENMILL_MASTER", "local[*]")
    if not given.contains("spark.master"):
        builder = builder.master(master)

    wanted: dict[str, str] = dict(DELTA_CONF)
    wanted["spark.sql.session.timeZone"] = "UTC"
    if master.startswith("local"):
        # 200 shuffle partitions (Spark's default) are pure overhead on one machine.
        cores = os.cpu_count() or 2
        if "[" in master and master[6:-1].isdigit():
            cores = int(master[6:-1])
        wanted["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        wanted["spark.databricks.delta.snapshotPartitions"] = str(max(1, cores))
    if not (given.get("spark.jars", "") or given.get("spark.jars.packages", "")):
        jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
        if not jars:
            raise JobError(
                f"Delta jars not found in {JARS_DIR}: run `make jars` (or `make setup`), or "
                "pass --packages to spark-submit (coordinates in infra/spark/packages.txt)"
            )
        wanted["spark.jars"] = ",".join(jars)
    if event_log_dir and not given.contains("spark.eventLog.dir"):
        wanted["spark.eventLog.enabled"] = "true"
        wanted["spark.eventLog.dir"] = event_log_dir
        wanted["spark.eventLog.compress"] = "true"
    wanted.update(config.spark.conf)
    if wanted.get("spark.eventLog.enabled") == "true" and "://" not in wanted.get(
            "spark.eventLog.dir", "://"):
        # Spark refuses to start when the folder is missing.
        Path(wanted["spark.eventLog.dir"].removeprefix("file:")).mkdir(parents=True, exist_ok=True)
    for key, value in wanted.items():
        if not given.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TOKENMILL_SPARK_LOG_LEVEL", "WARN"))
    return spark


# --------------------------------------------------------------------------- lake


def table_path(root: str, table: Table | str) -> str:
    name = table if isinstance(table, str) else table.name
    return f"{root.rstrip('/')}/{name}"


def normalise_root(root: str) -> str:
    if "://" in root:
        return root.rstrip("/")
    return str(Path(root).expanduser().resolve())


def delete_path(spark: Any, path: str) -> None:
    """Recursive delete through Hadoop's FileSystem, so it works for local paths and s3a."""
    fs, hpath = _hadoop(spark, path)
    if fs.exists(hpath):
        fs.delete(hpath, True)


def _hadoop(spark: Any, path: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def path_exists(spark: Any, path: str) -> bool:
    fs, hpath = _hadoop(spark, path)
    return bool(fs.exists(hpath))


def glob_paths(spark: Any, pattern: str) -> list[str]:
    """Paths matching a glob, local or s3a, sorted."""
    fs, hpath = _hadoop(spark, pattern)
    found = fs.globStatus(hpath) or []
    return sorted(str(st.getPath().toString()) for st in found)


def read_small_text(spark: Any, path: str) -> str:
    """A small file (a model's metadata) as text, through Hadoop's FileSystem."""
    fs, hpath = _hadoop(spark, path)
    stream = fs.open(hpath)
    try:
        jvm = spark.sparkContext._jvm
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def put_file(spark: Any, local: str | Path, dest: str) -> None:
    """Copies a local file into the lake (local folder or s3a) through Hadoop's FileSystem."""
    fs, hpath = _hadoop(spark, dest)
    jvm = spark.sparkContext._jvm
    fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(str(local)), hpath)


def delta_exists(spark: Any, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def delta_version(spark: Any, path: str) -> int | None:
    from delta.tables import DeltaTable

    if not delta_exists(spark, path):
        return None
    return int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])


def ensure_table(spark: Any, path: str, table: Table) -> None:
    """Creates the table with its declared schema (no-op if it exists). The schema version
    is a table property so readers can refuse a table they do not understand."""
    from delta.tables import DeltaTable

    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(table.schema)
        .property("tokenmill.table", table.name)
        .property("tokenmill.schema_version", str(table.version))
        .execute()
    )
    # A newer schema version may add nullable columns (never remove or retype one): a lake
    # written by an older release is migrated in place, in one commit.
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [f for f in table.schema.fields if f.name not in have]
    if missing:
        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                  f"('tokenmill.schema_version' = '{table.version}')")


def conform(df: Any, table: Table) -> Any:
    """Selects the table's columns in order with the declared types."""
    from pyspark.sql import functions as F

    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in table.schema])


def merge_rows(
    spark: Any, path: str, table: Table, df: Any, *, update: bool, replace_where: str | None = None
) -> int:
    """Idempotent write keyed by the table's key columns: new keys are inserted; existing
    ones are left alone (update=False: a rerun changes nothing) or replaced (update=True:
    ledgers). With `replace_where` (a condition on the target, e.g. one stage's rows), target
    rows that match it but are absent from `df` are deleted: the slice is replaced. One Delta
    commit either way, so a crash leaves the old or the new version."""
    from delta.tables import DeltaTable

    ensure_table(spark, path, table)
    cond = " AND ".join(f"t.{k} = s.{k}" for k in table.key)
    merge = DeltaTable.forPath(spark, path).alias("t").merge(conform(df, table).alias("s"), cond)
    if update:
        merge = merge.whenMatchedUpdateAll()
    merge = merge.whenNotMatchedInsertAll()
    if replace_where:
        merge = merge.whenNotMatchedBySourceDelete(replace_where)
    merge.execute()
    return delta_version(spark, path) or 0


def ship_file(spark: Any, path: str) -> str:
    """Makes a model or list file readable by every Python worker and returns what workers
    pass to `local_copy`: local paths as they are (local mode, shared file systems), remote
    ones (s3a://…) through SparkContext.addFile, fetched once per executor."""
    if "://" not in path or path.startswith("file:"):
        local = Path(path.removeprefix("file:")).expanduser().resolve()
        if not local.is_file():
            raise JobError(f"file not found: {path}")
        return str(local)
    spark.sparkContext.addFile(path)
    return "sparkfiles:" + path.rstrip("/").rsplit("/", 1)[-1]


def local_copy(shipped: str) -> str:
    """Worker side of `ship_file`: a local path to open."""
    if shipped.startswith("sparkfiles:"):
        from pyspark import SparkFiles

        return SparkFiles.get(shipped.removeprefix("sparkfiles:"))
    return shipped


def pick_input_table(ctx: Any, candidates: tuple[str, ...] | list[str]) -> str:
    """--input-table if given, else the first candidate table that exists under the root."""
    names = [ctx.args.input_table] if getattr(ctx.args, "input_table", None) else list(candidates)
    for name in names:
        if delta_exists(ctx.spark, ctx.path(name)):
            return name
    raise JobError(f"no input table: none of {', '.join(names)} exists under {ctx.root}")


# --------------------------------------------------------------------------- job context


@dataclass
class JobContext:
    job: str
    spark: Any
    config: PipelineConfig
    root: str
    run_id: str
    args: argparse.Namespace
    counts: Counter = field(default_factory=Counter)
    rows_in: int | None = None
    rows_out: int | None = None
    input_table: str | None = None
    input_version: int | None = None
    output_table: str | None = None
    output_version: int | None = None
    exit_code: int = EXIT_OK
    notes: list[str] = field(default_factory=list)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    gate_status: str | None = None
    gate_summary: str | None = None
    # (suite name, DataFrame) to validate when the body ends, if the job's output is not a
    # plain table version (tokenize_shards validates before it promotes the manifest).
    gate_done: bool = False

    @property
    def job_group(self) -> str:
        return f"{self.job}:{self.run_id}"

    def path(self, table: Table | str) -> str:
        return table_path(self.root, table)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """Names the Spark jobs of this step ("ingest: extract text") so the Spark UI reads as
        the pipeline, and logs how long the step took."""
        sc = self.spark.sparkContext
        sc.setJobGroup(self.job_group, f"{self.job}: {description}", False)
        t0 = time.monotonic()
        log.info("%s: %s …", self.job, description)
        yield
        log.info("%s: %s done in %.1fs", self.job, description, time.monotonic() - t0)
        if os.environ.get(CRASH_AFTER_STEP) == description:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(137)

    def read_table(self, table: Table) -> Any:
        """The table's current version, pinned: the run reads one consistent snapshot and
        records which one in `runs`."""
        path = self.path(table)
        version = delta_version(self.spark, path)
        if version is None:
            raise JobError(f"input table {table.name!r} does not exist at {path}")
        self.input_table, self.input_version = table.name, version
        refuse_failed_gate(self, table.name, version)
        return self.spark.read.format("delta").option("versionAsOf", version).load(path)

    def resource_seconds(self) -> tuple[float, float] | None:
        """(task seconds, executor CPU seconds) of this run's Spark jobs, from the driver's
        status store (the data behind the Spark UI; it keeps the last spark.ui.retainedJobs
        jobs). Task seconds are core-seconds a task occupied, Python workers included: what
        the run costs. CPU seconds count the executors' JVM threads only."""
        try:
            store = self.spark.sparkContext._jsc.sc().statusStore()
            stages: set[int] = set()
            it = store.jobsList(None).iterator()
            while it.hasNext():
                job = it.next()
                group = job.jobGroup()
                if group.isDefined() and group.get() == self.job_group:
                    ids = job.stageIds()
                    stages.update(int(ids.apply(i)) for i in range(ids.size()))
            task_ms, cpu_ns = 0, 0
            for sid in stages:
                with contextlib.suppress(Exception):  # a stage that never ran
                    stage = store.lastStageAttempt(sid)
                    task_ms += int(stage.executorRunTime())
                    cpu_ns += int(stage.executorCpuTime())
            return task_ms / 1e3, cpu_ns / 1e9
        except Exception:  # noqa: BLE001 - an accounting gap must not fail the job
            log.warning("%s: could not read task times from the status store", self.job)
            return None

    def merge(
        self, table: Table, df: Any, *, update: bool = False, replace_where: str | None = None
    ) -> int:
        return merge_rows(
            self.spark, self.path(table), table, df, update=update, replace_where=replace_where
        )

    def staging_path(self, name: str = "") -> str:
        """Scratch space of this job under the lake (`_staging/<job>/…`), cleared by the job;
        one writer per lake, so a killed run's leftovers are simply overwritten."""
        base = self.path(f"_staging/{self.job}")
        return f"{base}/{name}" if name else base

    def stage(self, df: Any, name: str) -> Any:
        """Materialises an intermediate result as Parquet and reads it back, so the steps
        after it never recompute it (Python UDF work above all) and its lineage ends here."""
        path = self.staging_path(name)
        df.write.mode("overwrite").parquet(path)
        return self.spark.read.parquet(path)

    def overwrite(self, table: Table, df: Any) -> int:
        """A full rebuild: the whole table replaced in one Delta commit (readers see the old
        or the new version, never a mix)."""
        path = self.path(table)
        ensure_table(self.spark, path, table)
        conform(df, table).write.format("delta").mode("overwrite").option(
            "overwriteSchema", "true"
        ).save(path)
        return delta_version(self.spark, path) or 0

    def add_rejections(self, df: Any, *, replace_stage: bool = False) -> int:
        """Adds dropped documents to `rejections`, keyed by (stage, doc_id), so rerunning a
        stage never records the same drop twice. A stage that recomputes all its decisions
        (a full rebuild) passes replace_stage=True: its earlier rows that no longer apply go
        in the same commit."""
        from pyspark.sql import functions as F

        df = df.withColumn("stage", F.lit(self.job)).withColumn("run_id", F.lit(self.run_id))
        where = f"t.stage = '{self.job}'" if replace_stage else None
        return self.merge(REJECTIONS, df, update=replace_stage, replace_where=where)

    def record_run(self, status: str, error: str | None = None) -> None:
        ended = None if status == "running" else datetime.now(UTC)
        row = {
            "job": self.job,
            "run_id": self.run_id,
            "status": status,
            "input_table": self.input_table,
            "input_version": self.input_version,
            "output_table": self.output_table,
            "output_version": self.output_version,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "counts": {k: int(v) for k, v in self.counts.items()},
            "config_hash": self.config.hash(),
            "started_at": self.started_at,
            "ended_at": ended,
            "error": error,
            "gate_status": self.gate_status,
            "gate_summary": self.gate_summary,
            "task_seconds": None,
            "cpu_seconds": None,
        }
        if status != "running":
            seconds = self.resource_seconds()
            if seconds is not None:
                row["task_seconds"], row["cpu_seconds"] = seconds
        df = self.spark.createDataFrame([row], RUNS.schema)
        self.merge(RUNS, df, update=True)

    def summary(self, status: str, seconds: float) -> str:
        reasons = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()) if v)
        out = self.output_table or "-"
        if self.output_table and self.output_version is not None:
            out = f"{out}@v{self.output_version}"
        parts = [
            f"{self.job} {status}",
            f"run={self.run_id}",
            f"in={self.rows_in if self.rows_in is not None else '-'}",
            f"out={self.rows_out if self.rows_out is not None else '-'}",
            f"table={out}",
        ]
        if reasons:
            parts.append(f"[{reasons}]")
        if self.gate_status:
            parts.append(f"gate={self.gate_status}")
        parts.extend(self.notes)
        parts.append(f"{seconds:.1f}s")
        return " ".join(parts)


# --------------------------------------------------------------------------- gates


def run_output_gate(ctx: JobContext, suite: str, df: Any) -> bool:
    """Validates `df` against the table's suite (schemas/expectations.py), writes Data Docs
    under `<root>/_reports/data_docs/<run_id>/` and records the result on the context.
    Returns whether it passed. A no-op (True) with `gates.enabled: false`."""
    if not gates_on(ctx):
        return True
    from tokenmill.jobs.gates import run_gate

    docs = None
    if ctx.config.gates.data_docs:
        docs = (ctx.path(f"_reports/data_docs/{ctx.run_id}") if "://" not in ctx.root
                else None)
    with ctx.step(f"gate: {suite} expectations"):
        result = run_gate(ctx.spark, suite, df, ctx.config, docs, ctx.run_id)
    ctx.gate_done = True
    ctx.gate_status = "passed" if result.passed else "failed"
    ctx.gate_summary = "\n".join(result.failures) or None
    ctx.counts["gate_expectations"] = result.evaluated
    if result.failures:
        ctx.counts["gate_failures"] = len(result.failures)
    return result.passed


def gates_on(ctx: JobContext) -> bool:
    """`gates.enabled`, unless TOKENMILL_GATES=off (the test suite's switch: it runs
    hundreds of small jobs, and the gates have tests of their own)."""
    return ctx.config.gates.enabled and os.environ.get(GATES_ENV, "on") != "off"


def gate_output(ctx: JobContext) -> None:
    """The gate for a job whose output is a table version: validate exactly that version."""
    from tokenmill.schemas.expectations import SUITES

    name, version = ctx.output_table, ctx.output_version
    if name not in SUITES or version is None:
        return
    df = ctx.spark.read.format("delta").option("versionAsOf", version).load(ctx.path(name))
    run_output_gate(ctx, name, df)


def refuse_failed_gate(ctx: JobContext, table: str, version: int) -> None:
    """A stage never reads a table version whose gate failed: no bad data moves on."""
    from pyspark.sql import functions as F

    path = ctx.path(RUNS)
    if not delta_exists(ctx.spark, path):
        return
    runs = ctx.spark.read.format("delta").load(path)
    if "gate_status" not in runs.columns:
        return  # a lake from before gates
    # The newest verdict on that version counts: a gate rerun with a fixed config can pass it.
    failed = (
        runs.where((F.col("output_table") == table) & (F.col("output_version") == version)
                   & F.col("gate_status").isNotNull())
        .orderBy(F.col("ended_at").desc_nulls_last()).limit(1)
        .where(F.col("gate_status") == "failed")
        .select("run_id", "gate_summary").collect()
    )
    if failed:
        raise JobError(
            f"refusing to read {table}@v{version}: its gate failed in run {failed[0]['run_id']}"
            f" ({(failed[0]['gate_summary'] or '').splitlines()[0][:300]}); fix the cause and "
            f"rerun that stage"
        )


# --------------------------------------------------------------------------- CLI


def job_parser(job: str, description: str) -> argparse.ArgumentParser:
    """The argument shape every job shares; a job adds its own input arguments."""
    p = argparse.ArgumentParser(prog=f"jobs/{job}.py", description=description)
    p.add_argument(
        "--root",
        default=DEFAULT_ROOT,
        help="lake root: a local folder or s3a://bucket/prefix (default: %(default)s)",
    )
    p.add_argument("--config", help="pipeline config YAML (defaults: jobs/defaults.yaml)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value, e.g. --set ingest.max_html_bytes=1000000",
    )
    p.add_argument("--run-id", help="id of this run in `runs` (default: generated)")
    return p


def new_run_id(job: str) -> str:
    return f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def run_job(
    job: str,
    parser: argparse.ArgumentParser,
    body: Callable[[JobContext], None],
    argv: list[str] | None = None,
) -> int:
    """Parses arguments, validates config, runs the body inside a `runs` row (running →
    succeeded | failed) and prints the one-line summary. Returns the process exit code."""
    logging.basicConfig(
        level=os.environ.get("TOKENMILL_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"{job}: config error: {e}", file=sys.stderr)
        return EXIT_USAGE
    t0 = time.monotonic()
    root = normalise_root(args.root)
    # Event logs go into a local lake (the Spark History Server reads them from there); on a
    # cluster, spark.eventLog.dir comes from the cluster's own configuration.
    events = None if "://" in root else f"{root}/_spark_events"
    try:
        spark = build_session(f"tokenmill-{job}", config, event_log_dir=events)
    except JobError as e:
        print(f"{job}: {e}", file=sys.stderr)
        return EXIT_USAGE
    ctx = JobContext(
        job=job,
        spark=spark,
        config=config,
        root=root,
        run_id=args.run_id or new_run_id(job),
        args=args,
    )
    try:
        with ctx.step("record run start"):
            ctx.record_run("running")
        body(ctx)
        if not ctx.gate_done:
            gate_output(ctx)
        if ctx.gate_status == "failed":
            with ctx.step("record run end"):
                ctx.record_run("failed", "gate failed")
            print(ctx.summary("failed", time.monotonic() - t0), flush=True)
            print(f"{job}: gate failed, downstream stages will refuse {ctx.output_table}"
                  f"@v{ctx.output_version}:\n{ctx.gate_summary}", file=sys.stderr)
            return EXIT_GATE
        status = "succeeded" if ctx.exit_code == EXIT_OK else "partial"
        with ctx.step("record run end"):
            ctx.record_run(status)
        print(ctx.summary(status, time.monotonic() - t0), flush=True)
        return ctx.exit_code
    except Exception as e:  # noqa: BLE001 - every failure is recorded in `runs`
        message = f"{type(e).__name__}: {e}"
        if not isinstance(e, JobError):
            traceback.print_exc()
        with contextlib.suppress(Exception):
            ctx.record_run("failed", message[:4000])
        print(ctx.summary("failed", time.monotonic() - t0) + f" error={message[:500]}")
        print(f"{job}: {message}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, JobError) else EXIT_FAILED

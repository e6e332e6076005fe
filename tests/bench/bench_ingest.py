"""Ingest throughput against its floor, measured in one run.

    .venv/bin/python tests/bench/bench_ingest.py [--files 6] [--pages-per-file 200]

floor:  fastwarc iteration + charset decoding + Resiliparse extraction of every response, in
        one Python process, no Spark: what one core can do at best with these libraries.
spark:  the same files through ingest's extraction inside Spark (local[N], mapInArrow, output
        discarded with the `noop` sink), per core.
job:    the whole ingest job (ledger, staging, Delta MERGE of docs/rejections/warcs, runs),
        session already started, per core.
Ratios are per-core throughput over the floor's; peak RSS is the whole process tree
(driver, JVM, Python workers), sampled every 50 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def _tree_rss_bytes(root_pid: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


class PeakRss:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss_bytes(os.getpid()))
            time.sleep(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def floor(paths: list[Path]) -> tuple[int, float]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    from tokenmill.udfs.html import decode_html, extract_text

    records = 0
    t0 = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            try:
                for rec in ArchiveIterator(f, parse_http=True):
                    records += 1
                    if rec.record_type != WarcRecordType.response:
                        continue
                    payload = rec.reader.read()
                    if "html" not in (rec.http_content_type or ""):
                        continue
                    _, html = decode_html(payload, rec.http_charset)
                    extract_text(html)
            except OSError:
                pass  # the sample crawl plants damage; the floor simply stops at it
    return records, time.perf_counter() - t0


def records_without_spark(paths: list[Path]) -> tuple[int, float]:
    """ingest's own per-file function (charset, extraction, ids, text hash, URL parts,
    damage recovery), one process, no Spark: separates our per-record work from Spark's."""
    from tokenmill.jobs.lakeio import open_at
    from tokenmill.udfs.warc import WarcReadOptions, read_warc_file

    records = 0
    t0 = time.perf_counter()
    for path in paths:
        for row in read_warc_file(str(path), lambda off, p=str(path): open_at(p, off),
                                  WarcReadOptions()):
            if row["kind"] == "file":
                records += row["records"]
    return records, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--pages-per-file", type=int, default=1500)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["TOKENMILL_MASTER"] = f"local[{args.cores}]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENMILL_LOG_LEVEL", "WARNING")

    from tokenmill.jobs import ingest
    from tokenmill.jobs.config import PipelineConfig, SparkConfig
    from tokenmill.jobs.runtime import build_session
    from tokenmill.jobs.sample_crawl import write_sample_crawl

    work = Path(tempfile.mkdtemp(prefix="tokenmill-bench-"))
    crawl = work / "crawl"
    write_sample_crawl(crawl, files=args.files, pages_per_file=args.pages_per_file, seed=11)
    paths = sorted(crawl.glob("*.warc.gz"))
    mb = sum(p.stat().st_size for p in paths) / 1e6

    floor(paths[:1])  # warm imports and caches
    records, floor_s = floor(paths)
    floor_rps = records / floor_s
    own_records, own_s = records_without_spark(paths)

    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    spark = build_session("tokenmill-bench", PipelineConfig(spark=SparkConfig(conf)))
    cfg = PipelineConfig().ingest
    path_df = spark.createDataFrame(
        spark.sparkContext.parallelize([(str(p),) for p in paths], len(paths)), "path string"
    )
    reader = ingest.make_warc_reader(cfg)
    path_df.limit(1).mapInArrow(reader, ingest.STAGING_DDL).write.format("noop").mode(
        "overwrite").save()  # start the Python workers
    with PeakRss() as rss_spark:
        t0 = time.perf_counter()
        path_df.mapInArrow(reader, ingest.STAGING_DDL).write.format("noop").mode(
            "overwrite").save()
        spark_s = time.perf_counter() - t0

    # One small run first, so that Delta's first-use start-up is not billed to the measurement.
    warm = work / "warm"
    assert ingest.main(["--root", str(warm), "--input", str(paths[0])]) == 0
    root = work / "lake"
    with PeakRss() as rss_job:
        t0 = time.perf_counter()
        rc = ingest.main(["--root", str(root), "--input", f"{crawl}/*.warc.gz"])
        job_s = time.perf_counter() - t0
    assert rc == 0, rc
    ledger = spark.read.format("delta").load(f"{root}/warcs").agg({"records": "sum"})
    total = int(ledger.collect()[0][0])  # every record, including those after damage

    def line(label: str, seconds: float, peak: int) -> str:
        rps = total / seconds / args.cores
        return (
            f"{label:28s} {rps:8.0f} records/s  {mb / seconds / args.cores:6.2f} MB/s  "
            f"ratio to floor {rps / floor_rps:.2f}  peak RSS {peak / 2**30:.2f} GiB  "
            f"({seconds:.1f}s wall)"
        )

    print(f"input: {len(paths)} files, {total} WARC records, {mb:.1f} MB (gzip), "
          f"local[{args.cores}]")
    floor_mb = mb * records / total  # the floor stops reading a file at its damaged region
    print(f"{'floor (1 process, no Spark)':28s} {floor_rps:8.0f} records/s  "
          f"{floor_mb / floor_s:6.2f} MB/s  ({records} records, {floor_s:.1f}s wall)")
    print(f"{'ingest records, no Spark':28s} {own_records / own_s:8.0f} records/s  "
          f"{mb / own_s:6.2f} MB/s  ratio to floor {own_records / own_s / floor_rps:.2f}  "
          f"({own_s:.1f}s wall)")
    print(line("spark extraction, per core", spark_s, rss_spark.peak))
    print(line("whole ingest job, per core", job_s, rss_job.peak))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

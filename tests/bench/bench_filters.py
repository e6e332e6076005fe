"""Filter stages' throughput against their floor, measured in one run.

    .venv/bin/python tests/bench/bench_filters.py [--files 8] [--pages-per-file 250]

A sample crawl of the given size is generated and ingested (not timed), the perplexity model
trained (not timed), then:

floor:  the stage's Python work alone, one process, no Spark, on the same documents:
        langid: batched fastText predict; urlfilter: the blocklist check of every URL;
        quality: quality_signals + toxic word ratio + perplexity of every text.
job:    the whole Spark job (read, signals pass, Delta MERGE of the signals, predicate,
        kept table, rejections, runs), session already started, docs/s per core.
signals: the job's "compute signals" step alone (the Arrow-batched Python pass), per core.

Ratios are per-core throughput over the floor's. Where the time goes is printed per step
(the job's own step timings).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

STEP_DONE = re.compile(r"^(\w+): (.+) done in ([\d.]+)s$")


class StepTimes(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, dict[str, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        m = STEP_DONE.match(record.getMessage())
        if m:
            job, step, secs = m.group(1), m.group(2), float(m.group(3))
            self.steps.setdefault(job, {})[step] = secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--pages-per-file", type=int, default=250)
    args = ap.parse_args()

    cores = int(os.environ.get("BENCH_CORES", "2"))
    os.environ.setdefault("TOKENMILL_MASTER", f"local[{cores}]")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from tokenmill.jobs import ingest, langid, quality, train_lm, urlfilter
    from tokenmill.jobs.config import PipelineConfig
    from tokenmill.jobs.sample_crawl import write_sample_crawl

    conf = json.dumps({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    sets = [f"--set=spark.conf={conf}"]
    timer = StepTimes()
    logging.basicConfig(level=logging.INFO)
    logging.getLogger().addHandler(timer)
    logging.getLogger("py4j").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="bench-filters-") as tmp:
        crawl, root = Path(tmp) / "crawl", Path(tmp) / "lake"
        write_sample_crawl(crawl, files=args.files, pages_per_file=args.pages_per_file, seed=11)
        assert ingest.main(["--root", str(root), "--input", str(crawl / "*.warc.gz"), *sets]) == 0
        assert train_lm.main(["--root", str(root), *sets]) == 0

        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        # The stages in their chain, langid keeping every language (so each stage sees nearly
        # all documents); each floor runs on the same rows as its stage's input table.
        keep_all = ["--set", "langid.languages=[]", "--set", "langid.min_score=0"]
        results, floors, sizes = {}, {}, {}
        for name, job, source, extra in (
            ("langid", langid, "docs", keep_all),
            ("urlfilter", urlfilter, "langid", []),
            ("quality", quality, "urlfilter", []),
        ):
            cols = ["text", "url"] + (["lang"] if source != "docs" else [])
            rows = spark.read.format("delta").load(f"{root}/{source}").select(*cols).collect()
            sizes[name] = len(rows)
            floors[name] = floor_rate(name, root, rows, PipelineConfig())
            t0 = time.perf_counter()
            assert job.main(["--root", str(root), *extra, *sets]) == 0
            results[name] = time.perf_counter() - t0
        n = sizes["langid"]
        chars = sum(len(r["text"]) for r in
                    spark.read.format("delta").load(f"{root}/docs").select("text").collect())
        print(f"\n{n} documents, {chars / n:.0f} chars mean, {cores} cores")
        print(f"{'stage':<10} {'docs':>6} {'floor/s':>9} {'job/s/core':>11} {'ratio':>6} "
              f"{'signals/s/core':>15} {'ratio':>6}")
        for name, wall in results.items():
            steps = timer.steps.get(name, {})
            job_rate = sizes[name] / wall / cores
            sig_rate = sizes[name] / steps.get("compute signals", float("nan")) / cores
            print(f"{name:<10} {sizes[name]:>6} {floors[name]:>9.0f} {job_rate:>11.1f} "
                  f"{job_rate / floors[name]:>6.3f} {sig_rate:>15.1f} "
                  f"{sig_rate / floors[name]:>6.3f}")
        print("\nwhere the time goes (seconds per step):")
        for name in results:
            steps = timer.steps.get(name, {})
            parts = ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
            print(f"  {name}: total {results[name]:.1f}: {parts}")
    return 0


def floor_rate(stage: str, root: Path, rows: list, cfg) -> float:
    """Documents per second of the stage's Python work alone, one core, no Spark."""
    from tokenmill.udfs.langid import load_model, predict_languages
    from tokenmill.udfs.perplexity import PerplexityScorer
    from tokenmill.udfs.quality import quality_signals
    from tokenmill.udfs.toxicity import load_word_list, toxic_word_ratio
    from tokenmill.udfs.urlfilter import load_blocklist

    texts = [r["text"] for r in rows]
    if stage == "langid":
        load_model(None)
        t0 = time.perf_counter()
        for i in range(0, len(texts), 10_000):
            predict_languages(texts[i:i + 10_000], max_chars=cfg.langid.max_chars)
        return len(texts) / (time.perf_counter() - t0)
    if stage == "urlfilter":
        lists = load_blocklist()
        t0 = time.perf_counter()
        for r in rows:
            lists.check(r["url"])
        return len(rows) / (time.perf_counter() - t0)
    meta = json.loads((root / "models/lm/en/model.json").read_text())
    scorer = PerplexityScorer.load(root / "models/lm/en" / meta["sp_model"],
                                   root / "models/lm/en" / meta["kenlm"])
    words = load_word_list()
    c4 = cfg.quality.c4_params()
    t0 = time.perf_counter()
    english = []
    for r in rows:
        clean, _ = quality_signals(r["text"], c4)
        toxic_word_ratio(clean, words)
        if r["lang"] == "en":
            english.append(clean)
    scorer.perplexities(english)
    return len(rows) / (time.perf_counter() - t0)


if __name__ == "__main__":
    raise SystemExit(main())

"""PII masking and tokenization throughput against their references, measured in one run.

    .venv/bin/python tests/bench/bench_pii_tokenize.py [--files 3] [--pages-per-file 60]

pii:      mask_pii with the prefilter vs Presidio on every document (same texts, one process,
          no Spark), per mode; the ratio is the prefilter's speed-up.
tokenize: the tokenize_shards job (encode + EOS + shard files + shard_docs + manifest), tokens/s
          per core, vs SentencePiece's batch encode alone of the same texts in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--pages-per-file", type=int, default=60)
    args = ap.parse_args()
    cores = int(os.environ.get("BENCH_CORES", "2"))
    os.environ.setdefault("TOKENMILL_MASTER", f"local[{cores}]")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from tokenmill.jobs import ingest, tokenize_shards, train_tokenizer
    from tokenmill.jobs.sample_crawl import write_sample_crawl
    from tokenmill.udfs.pii import PiiParams, mask_pii

    conf = json.dumps({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    sets = [f"--set=spark.conf={conf}"]
    with tempfile.TemporaryDirectory(prefix="bench-pii-") as tmp:
        crawl, root = Path(tmp) / "crawl", Path(tmp) / "lake"
        write_sample_crawl(crawl, files=args.files, pages_per_file=args.pages_per_file, seed=13)
        assert ingest.main(["--root", str(root), "--input", str(crawl / "*.warc.gz"), *sets]) == 0
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        docs = spark.read.format("delta").load(f"{root}/docs")
        texts = [r["text"] for r in docs.select("text").collect()]
        print(f"\n{len(texts)} documents, {sum(map(len, texts)) / len(texts):.0f} chars mean")

        print(f"{'pii mode':<10} {'prefilter/s':>12} {'every doc/s':>12} {'speed-up':>9}")
        for mode in ("patterns", "ner"):
            params = PiiParams(mode=mode)
            mask_pii(texts[:2], params)  # load the pipeline outside the timing
            t0 = time.perf_counter()
            with_pf = mask_pii(texts, params, prefilter=True)
            fast = len(texts) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            without = mask_pii(texts, params, prefilter=False)
            slow = len(texts) / (time.perf_counter() - t0)
            assert with_pf == without, "the prefilter changed a mask"
            print(f"{mode:<10} {fast:>12.1f} {slow:>12.1f} {fast / slow:>9.2f}")

        docs.write.format("delta").save(f"{root}/clean")
        assert train_tokenizer.main(["--root", str(root), "--input-table", "clean", *sets]) == 0
        import sentencepiece as spm

        meta = json.loads((root / "tokenizer" / "latest.json").read_text())
        sp = spm.SentencePieceProcessor(model_file=str(root / "tokenizer" / meta["path"]))
        t0 = time.perf_counter()
        tokens = sum(len(ids) + 1 for ids in sp.encode(texts))
        floor = tokens / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert tokenize_shards.main(["--root", str(root), *sets]) == 0
        wall = time.perf_counter() - t0
        job = tokens / wall / cores
        print(f"\ntokenize: {tokens} tokens; SentencePiece encode alone {floor:,.0f} tokens/s; "
              f"job {job:,.0f} tokens/s/core ({wall:.1f}s); ratio {job / floor:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

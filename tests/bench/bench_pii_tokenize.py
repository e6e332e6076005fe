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
    ap.add_argument("--pii-docs", type=int, default=300,
                    help="documents for the PII comparison (NER runs ~8 docs/s)")
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
        all_texts = [r["text"] for r in docs.orderBy("doc_id").select("text").collect()]
        texts = all_texts[: args.pii_docs]
        print(f"\n{len(all_texts)} documents, {sum(map(len, all_texts)) / len(all_texts):.0f} "
              f"chars mean; PII on the first {len(texts)}")

        print(f"{'pii mode':<10} {'prefilter/s':>12} {'every doc/s':>12} {'speed-up':>9}")
        for mode in ("patterns", "ner"):
            params = PiiParams(mode=mode)
            # Warm up every lazy part (pipeline, recognizers' patterns) outside the timing.
            mask_pii(texts[:40], params, prefilter=False)

            def best(prefilter: bool, params=params) -> tuple[float, list]:
                times, out = [], None
                for _ in range(2):
                    t0 = time.perf_counter()
                    out = mask_pii(texts, params, prefilter=prefilter)
                    times.append(time.perf_counter() - t0)
                return len(texts) / min(times), out

            fast, with_pf = best(True)
            slow, without = best(False)
            assert with_pf == without, "the prefilter changed a mask"
            print(f"{mode:<10} {fast:>12.1f} {slow:>12.1f} {fast / slow:>9.2f}")

        docs.write.format("delta").save(f"{root}/clean")
        assert train_tokenizer.main(["--root", str(root), "--input-table", "clean", *sets]) == 0
        import sentencepiece as spm

        meta = json.loads((root / "tokenizer" / "latest.json").read_text())
        sp = spm.SentencePieceProcessor(model_file=str(root / "tokenizer" / meta["path"]))
        t0 = time.perf_counter()
        tokens = sum(len(ids) + 1 for ids in sp.encode(all_texts))
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

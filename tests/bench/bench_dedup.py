"""Dedup at scale against exact-Jaccard ground truth, with datasketch as the reference.

    .venv/bin/python tests/bench/bench_dedup.py --docs 100000 [--docs 1000000] [--words 80]

Corpus: random documents over a 20,000-word vocabulary (independent documents share no
5-gram), plus planted copies of some of them with words replaced so that their exact Jaccard
similarity to the original lies around 0.5–0.98. Ground truth is the exact shingle Jaccard
inside each planted group (pairs across groups are ~0). For every size it prints wall time,
peak RSS of the process tree (driver, JVM, Python workers), docs/s, and pair precision and
recall of "same cluster" against J ≥ 0.8. The reference is datasketch's MinHashLSH (same
num_perm, same shingles and hash, one process) on the first --reference-docs documents of the
same corpus, timed in the same run.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_ingest import PeakRss  # noqa: E402

TARGETS = (0.98, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)


def make_corpus(n_docs: int, words: int, dup_fraction: float, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(4, 10))) for _ in range(20_000)]
    vocab_arr = np.array(vocab)
    n_copies = int(n_docs * dup_fraction)
    n_base = n_docs - n_copies
    base_words = vocab_arr[rng.integers(0, len(vocab), size=(n_base, words))]
    texts = [" ".join(row) for row in base_words]
    group = list(range(n_base))  # group id = index of the original
    prng = random.Random(seed)
    for _ in range(n_copies):
        b = prng.randrange(n_base)
        target = prng.choice(TARGETS)
        # Replacing k of W words changes ~5k of the W-4 shingles: J ≈ (S-5k)/(S+5k).
        s = words - 4
        k = max(1, round(s * (1 - target) / (5 * (1 + target))))
        row = base_words[b].copy()
        idx = rng.choice(words, size=min(k, words), replace=False)
        row[idx] = vocab_arr[rng.integers(0, len(vocab), size=len(idx))]
        texts.append(" ".join(row))
        group.append(b)
    ids = [f"{i:09d}" for i in range(n_docs)]
    return ids, texts, group


def ground_truth(texts, group):
    """Pairs (a, b) inside planted groups with exact Jaccard, by index."""
    from tokenmill.udfs.minhash import exact_jaccard, word_shingles

    members: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        members.setdefault(g, []).append(i)
    pairs = {}
    for m in members.values():
        if len(m) < 2:
            continue
        sh = {i: set(word_shingles(texts[i])) for i in m}
        for a, b in combinations(m, 2):
            pairs[(a, b)] = exact_jaccard(sh[a], sh[b])
    return pairs


def score(cluster_of: dict[int, int], pairs: dict, n_docs: int) -> tuple[float, float]:
    tp = fn = fp_in = 0
    for (a, b), j in pairs.items():
        same = a in cluster_of and cluster_of.get(a) == cluster_of.get(b)
        if j >= 0.8:
            tp += same
            fn += not same
        elif same:
            fp_in += 1
    # Clustered pairs that are not planted pairs are false positives too (J ≈ 0).
    sizes: dict[int, int] = {}
    for c in cluster_of.values():
        sizes[c] = sizes.get(c, 0) + 1
    clustered_pairs = sum(s * (s - 1) // 2 for s in sizes.values())
    planted_clustered = sum(
        1 for (a, b) in pairs if a in cluster_of and cluster_of.get(a) == cluster_of.get(b)
    )
    fp = fp_in + (clustered_pairs - planted_clustered)
    return tp / max(1, tp + fp), tp / max(1, tp + fn)


def removal_score(cluster_of: dict[int, int], kept: set[int], pairs: dict) -> tuple[float, float]:
    """Removed documents against the ideal removal: union-find the pairs with exact J ≥ 0.8;
    a true cluster of size s should lose s − 1 documents. A removed document counts as right
    while its true cluster still has more than one survivor's worth to lose."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), j in pairs.items():
        if j >= 0.8:
            parent[find(a)] = find(b)
    true_clusters: dict[int, set[int]] = {}
    for x in list(parent):
        true_clusters.setdefault(find(x), set()).add(x)
    removed = {d for d in cluster_of if d not in kept}
    tp = sum(min(len(removed & c), len(c) - 1) for c in true_clusters.values())
    should = sum(len(c) - 1 for c in true_clusters.values())
    return tp / max(1, len(removed)), tp / max(1, should)


def reference(texts: list[str], ids: list[str]) -> tuple[dict[int, int], float]:
    """datasketch MinHashLSH: build, query, verify at 0.8, union-find."""
    from datasketch import MinHash, MinHashLSH

    from tokenmill.udfs.minhash import shingle_hash32, word_shingles

    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    sigs = []
    for i, text in enumerate(texts):
        mh = MinHash(num_perm=128, seed=1, hashfunc=shingle_hash32)
        mh.update_batch([s.encode() for s in word_shingles(text)])
        lsh.insert(i, mh)
        sigs.append(mh)
    parent = list(range(len(texts)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, mh in enumerate(sigs):
        for j in lsh.query(mh):
            if j != i and mh.jaccard(sigs[j]) >= 0.8:
                parent[find(i)] = find(j)
    roots = [find(i) for i in range(len(texts))]
    counts: dict[int, int] = {}
    for r in roots:
        counts[r] = counts.get(r, 0) + 1
    cluster_of = {i: r for i, r in enumerate(roots) if counts[r] > 1}
    return cluster_of, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, action="append")
    parser.add_argument("--words", type=int, default=80)
    parser.add_argument("--dup-fraction", type=float, default=0.2)
    parser.add_argument("--reference-docs", type=int, default=20_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--verify", choices=("signature", "exact"), default="exact")
    args = parser.parse_args()
    sizes = args.docs or [100_000]

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["TOKENMILL_MASTER"] = f"local[{args.cores}]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TOKENMILL_LOG_LEVEL", "WARNING")
    import pandas as pd

    from tokenmill.jobs import dedup
    from tokenmill.jobs.config import PipelineConfig, SparkConfig
    from tokenmill.jobs.runtime import build_session

    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "8g"}
    spark = build_session("tokenmill-bench-dedup", PipelineConfig(spark=SparkConfig(conf)))
    work = Path(tempfile.mkdtemp(prefix="tokenmill-bench-dedup-"))
    results = []
    for n in sizes:
        t0 = time.perf_counter()
        ids, texts, group = make_corpus(n, args.words, args.dup_fraction, seed=n)
        pairs = ground_truth(texts, group)
        root = work / f"lake-{n}"
        pdf = pd.DataFrame({"doc_id": ids, "url": [f"http://x/{i}" for i in ids], "text": texts})
        spark.createDataFrame(pdf).write.format("delta").save(f"{root}/docs")
        gen_s = time.perf_counter() - t0

        with PeakRss() as rss:
            t0 = time.perf_counter()
            rc = dedup.main(["--root", str(root), "--set", "dedup.boilerplate=false",
                             "--set", f"dedup.verify={args.verify}"])
            wall = time.perf_counter() - t0
        assert rc == 0, rc
        rows = spark.read.format("delta").load(f"{root}/dup_clusters").select(
            "doc_id", "cluster_id").collect()
        index = {d: i for i, d in enumerate(ids)}
        cluster_of = {index[r["doc_id"]]: index[r["cluster_id"]] for r in rows}
        precision, recall = score(cluster_of, pairs, n)
        kept_ids = {index[r["doc_id"]] for r in spark.read.format("delta").load(
            f"{root}/dup_clusters").where("kind = 'representative'").select("doc_id").collect()}
        rp, rr = removal_score(cluster_of, kept_ids, pairs)
        kept = spark.read.format("delta").load(f"{root}/deduped").count()
        results.append((n, wall, rss.peak, precision, recall, kept))
        print(f"[{n:>9,} docs, verify={args.verify}] generated in {gen_s:.0f}s; "
              f"dedup {wall:7.1f}s wall, "
              f"{n / wall:7.0f} docs/s ({n / wall / args.cores:.0f}/core), peak RSS "
              f"{rss.peak / 2**30:.2f} GiB, kept {kept:,}; removed docs precision {rp:.4f} "
              f"recall {rr:.4f}; same-cluster pairs precision {precision:.4f} recall "
              f"{recall:.4f} (J >= 0.8 pairs: {sum(j >= 0.8 for j in pairs.values()):,})",
              flush=True)

    # Reference: datasketch on a prefix of the smallest corpus (original documents first,
    # copies after, so the prefix holds the originals of many of the copies).
    n = sizes[0]
    ids, texts, group = make_corpus(n, args.words, args.dup_fraction, seed=n)
    m = min(args.reference_docs, n)
    n_base = n - int(n * args.dup_fraction)
    take = list(range(min(m // 2, n_base))) + [
        i for i in range(n_base, n) if group[i] < m // 2][: m - min(m // 2, n_base)]
    sub_texts = [texts[i] for i in take]
    sub_group = [group[i] for i in take]
    position = {i: k for k, i in enumerate(take)}
    sub_pairs = ground_truth(
        sub_texts, [position.get(g, -1 - k) for k, g in enumerate(sub_group)]
    )
    cluster_of, ref_s = reference(sub_texts, [ids[i] for i in take])
    p, r = score(cluster_of, sub_pairs, len(take))
    ref_kept = {min(i for i in cluster_of if cluster_of[i] == c) for c in set(cluster_of.values())}
    rp, rr = removal_score(cluster_of, ref_kept, sub_pairs)
    ref_rate = len(take) / ref_s
    ours_rate = results[0][0] / results[0][1]
    print(f"[reference] datasketch MinHashLSH(threshold=0.8, num_perm=128), 1 process, "
          f"{len(take):,} docs: {ref_s:.1f}s, {ref_rate:.0f} docs/s; removed docs precision "
          f"{rp:.4f} recall {rr:.4f}; same-cluster pairs precision {p:.4f} recall {r:.4f}; "
          f"tokenmill/datasketch throughput ratio {ours_rate / ref_rate:.2f} "
          f"(local[{args.cores}], whole job incl. Delta writes)")
    if len(results) > 1:
        (n0, w0, *_), (n1, w1, *_) = results[0], results[-1]
        print(f"[growth] {n0:,} → {n1:,} docs ({n1 / n0:.0f}×): wall time ×{w1 / w0:.1f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

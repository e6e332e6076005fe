"""Trainer throughput on CPU against a plain PyTorch loop of the same model, in one run.

    .venv/bin/python tests/bench/bench_train.py [--steps 30] [--dim 256] [--layers 4]

trainer:   train/train.py under torchrun, 2 processes (gloo), FSDP2 zero3 and zero2, on shards
           written here from the sample generator's articles; tokens/s over the steps after
           the first log window (the warm-up), from its metrics.jsonl.
reference: the same Transformer, batch and sequence length in one process with 2 threads,
           no sharding, no data loading, no guard: AdamW on random tokens.

The ratio trainer / reference is what sharding over gloo, the shard reads and the guard
cost on a 2-core machine; on GPUs the MFU the trainer prints is the number to watch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def write_shards(lake: Path, docs: int) -> Path:
    import sentencepiece as spm

    from tokenmill.jobs.sample_crawl import reference_corpus
    from tokenmill.tokenize.manifest import ShardEntry, build_manifest, file_sha256, write_manifest
    from tokenmill.tokenize.shards import ShardWriter

    texts = reference_corpus("en", docs, seed=11)
    tok = lake / "tokenizer"
    tok.mkdir(parents=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(tok / "tokenizer"), model_type="bpe",
        vocab_size=2000, byte_fallback=True, num_threads=1, pad_id=-1, unk_id=0, bos_id=1,
        eos_id=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tok / "tokenizer.model"))
    entries = []
    for part in range(2):
        rel = f"bench/cc/part-{part:05d}"
        (lake / "shards" / rel).parent.mkdir(parents=True, exist_ok=True)
        with ShardWriter(lake / "shards" / rel, sp.get_piece_size()) as w:
            for k, text in enumerate(texts[part::2]):
                w.add_document([*sp.encode(text), 2], doc_id=f"d{part}-{k}")
        entries.append(ShardEntry(path=rel, source="cc", documents=w.documents,
                                  tokens=w.tokens, dtype="uint16"))
    manifest, _ = build_manifest(
        entries, tokenizer={"path": "../tokenizer/tokenizer.model",
                            "sha256": file_sha256(tok / "tokenizer.model"),
                            "vocab_size": sp.get_piece_size(), "eos_id": 2}, seed=1)
    path = lake / "shards" / "manifest.json"
    write_manifest(manifest, path)
    return path


def trainer_tokens_per_s(manifest: Path, out: Path, args: argparse.Namespace, mode: str) -> float:
    cmd = [str(VENV_BIN / "torchrun"), "--standalone", "--nproc_per_node=2",
           str(REPO / "train" / "train.py"), "--manifest", str(manifest), "--config", "tiny",
           f"--model.dim={args.dim}", f"--model.n_layers={args.layers}",
           f"--model.n_heads={args.dim // 64}", "--model.n_kv_heads=0",
           f"--data.seq_len={args.seq_len}", f"--data.global_batch={args.batch}",
           f"--data.micro_batch={args.batch // 2}", f"--train.steps={args.steps}",
           "--data.val_every=0", "--checkpoint.every=0", "--checkpoint.export=false",
           "--metrics.log_every=5", "--metrics.tensorboard=false", f"--fsdp.mode={mode}",
           f"--train.out={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-4000:])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r["tokens_per_s"] for r in rows if r["kind"] == "train" and r["step"] > 5]
    return sum(timed) / len(timed)


def reference_tokens_per_s(vocab: int, args: argparse.Namespace) -> float:
    import torch
    import torch.nn.functional as F

    from tokenmill.train.model import ModelConfig, Transformer

    torch.set_num_threads(2)
    model = Transformer(ModelConfig(vocab_size=vocab, dim=args.dim, n_layers=args.layers,
                                    n_heads=args.dim // 64, max_seq_len=args.seq_len))
    model.init_weights(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    tokens = torch.randint(0, vocab, (args.batch, args.seq_len + 1))

    def step() -> None:
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    n = args.steps - 5
    for _ in range(n):
        step()
    return n * args.batch * args.seq_len / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--docs", type=int, default=600)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        manifest = write_shards(Path(tmp) / "lake", args.docs)
        vocab = json.loads(manifest.read_text())["tokenizer"]["vocab_size"]
        ref = reference_tokens_per_s(vocab, args)
        results = {mode: trainer_tokens_per_s(manifest, Path(tmp) / mode, args, mode)
                   for mode in ("zero3", "zero2")}
    shape = f"dim {args.dim}, {args.layers} layers, seq {args.seq_len}, batch {args.batch}"
    print(f"train bench ({shape}, {args.steps} steps, 2 cores)")
    print(f"  reference (1 process, 2 threads, no sharding): {ref:,.0f} tokens/s")
    for mode, tps in results.items():
        print(f"  trainer {mode} (2 processes, FSDP2/gloo):  {tps:,.0f} tokens/s  "
              f"ratio {tps / ref:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

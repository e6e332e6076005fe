#!/usr/bin/env bash
# The trainer's GPU check: the 1b preset (Llama-3.2-1B's shape, 32k vocabulary), bf16,
# sequence length 2048, on one GPU: 20 warm-up steps, then 50 timed ones. Prints tokens/s,
# MFU and peak memory. Needs only PyTorch (>= 2.11) and numpy, not the installed package:
#
#   bash infra/gpu/train_check.sh [LAKE]      # LAKE/shards/manifest.json, e.g. from make demo
#
# The demo's shards are small (tens of thousands of tokens); the sample order simply runs
# over them for several epochs, which changes nothing for throughput.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAKE=${1:-lake}
OUT=${OUT:-$(mktemp -d)/gpu-check}
NPROC=${NPROC:-1}
PY=${PYTHON:-python3}

"$PY" - <<'PY'
import sys
import torch
assert sys.version_info >= (3, 11), f"the trainer needs Python >= 3.11, this is {sys.version}"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"cuda {torch.version.cuda}, device {torch.cuda.get_device_name()}", flush=True)
PY

# Not installed here: expose train/ and tokenize/ under the tokenmill namespace.
PKG=$(mktemp -d)
mkdir -p "$PKG/tokenmill"
ln -s "$PWD/train" "$PKG/tokenmill/train"
ln -s "$PWD/tokenize" "$PKG/tokenmill/tokenize"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" train/train.py \
  --manifest "$LAKE/shards/manifest.json" --config 1b \
  --model.vocab_size=32000 --data.seq_len=2048 --data.global_batch=$((8 * NPROC)) \
  --data.micro_batch=8 --data.val_every=0 --train.steps=70 --optim.warmup_steps=20 \
  --checkpoint.every=0 --checkpoint.export=false --metrics.log_every=10 \
  --metrics.tensorboard=false --train.resume=false --train.out="$OUT" ${EXTRA_ARGS:-}

# Timed window: the log lines after step 20 (each covers the 10 steps before it).
"$PY" - "$OUT/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
timed = [r for r in rows if r["kind"] == "train" and r["step"] > 20]
tps = sum(r["tokens_per_s"] for r in timed) / len(timed)
mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
mem = max(r.get("mem_peak_gib") or 0 for r in rows if r["kind"] == "train")
mfu_text = f"{100 * sum(mfu) / len(mfu):.1f}%" if mfu else "n/a"
print(f"gpu check: {len(timed) * 10} timed steps, {tps:,.0f} tokens/s, MFU {mfu_text}, "
      f"peak memory {mem:.1f} GiB")
PY

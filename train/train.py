"""Train a Llama-style model on tokenmill's token shards with FSDP2.

    torchrun --standalone --nproc_per_node=2 train/train.py \\
        --manifest lake/shards/manifest.json --config tiny [--section.key=value ...]

main() reads top to bottom: config → processes and device mesh → data → model on the meta
device → FSDP2 sharding → optimizer → resume → training loop (loss-spike guard, metrics,
validation, checkpoints) → export. The pieces live beside this file: model.py, data.py,
checkpoint.py, guard.py, metrics.py, config.py. No Spark is imported.

Exit codes: 0 done; 2 bad arguments, config or manifest; 3 stopped by the loss-spike guard
(a person must look: see <out>/stopped.json); 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script (torchrun train/train.py): Python put train/ first on sys.path, where
    # config.py, data.py... would be found under their bare names; import the package instead.
    sys.path.pop(0)

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from tokenmill.tokenize.files import write_text_atomic
from tokenmill.train import checkpoint
from tokenmill.train.config import Config, load_config
from tokenmill.train.data import (
    BatchPlan,
    ShardData,
    garble,
    unigram_logprobs,
    validation_tokens,
)
from tokenmill.train.guard import RecoveryPolicy, SpikeDetector, batch_looks_normal
from tokenmill.train.metrics import (
    MetricsLogger,
    StepTimer,
    flops_per_token,
    loss_curve,
    memory_stats,
    mfu,
    peak_flops,
)
from tokenmill.train.model import Transformer

log = logging.getLogger("tokenmill.train")
EXIT_BAD_INPUT, EXIT_GUARD_STOP = 2, 3
DECISIONS = "guard_decisions.json"  # skipped batches, LR scale, rollbacks: survives crashes


class BadInput(Exception):
    """Bad arguments, config or manifest: exit code 2."""


# --------------------------------------------------------------------------------------------
# Processes, devices, sharding


def init_processes(device_kind: str) -> tuple[int, int, torch.device]:
    """Join the process group torchrun set up (or make a group of one without torchrun)."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_kind == "cuda" or (device_kind == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return rank, world, device


def shard_model(model: Transformer, cfg: Config, world: int, device: torch.device) -> None:
    """FSDP2: one fully_shard unit per block, then the root (embeddings, norm, output)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world,))
    bf16 = cfg.fsdp.mixed_precision == "bf16" or (
        cfg.fsdp.mixed_precision == "auto" and device.type == "cuda")
    # bf16 compute with fp32 gradient reduction and fp32 master weights in the optimizer.
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if bf16 else MixedPrecisionPolicy())
    reshard = cfg.fsdp.mode == "zero3"
    for block in model.layers:
        if cfg.fsdp.compile:
            block.compile()  # in place: state-dict keys stay the same with or without it
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
    # The root's parameters are used last in forward and first in backward: resharding them
    # in between would only gather them again at once.
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp)


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def lr_at(step: int, cfg: Config) -> float:
    """Linear warmup, then cosine decay to min_lr_ratio * lr at the last step."""
    o = cfg.optim
    if step < o.warmup_steps:
        return o.lr * (step + 1) / o.warmup_steps
    span = max(1, cfg.train.steps - o.warmup_steps)
    progress = min(1.0, (step - o.warmup_steps) / span)
    return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def sample_losses(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of each sample (B,), in fp32."""
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(),
                           reduction="none")
    return loss.view(tokens.shape[0], -1).mean(dim=1)


# --------------------------------------------------------------------------------------------
# The run


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, help="<lake>/shards/manifest.json")
    parser.add_argument("--config", default="tiny",
                        help="preset name (train/presets/<name>.toml) or a TOML file")
    args, rest = parser.parse_known_args(argv)
    # "--a.b value" as well as "--a.b=value"
    overrides, i = [], 0
    while i < len(rest):
        item = rest[i]
        if item.startswith("--") and "=" not in item and i + 1 < len(rest):
            item, i = f"{item}={rest[i + 1]}", i + 1
        overrides.append(item)
        i += 1
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args, overrides = parse_args(argv)
    try:
        cfg = load_config(args.config, overrides)
        data = ShardData(args.manifest, cfg.data.holdout_last_shard)
    except (ValueError, FileNotFoundError) as e:
        print(f"train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    rank, world, device = init_processes(cfg.train.device)
    try:
        return train(cfg, data, args.manifest, rank, world, device)
    except BadInput as e:
        if rank == 0:
            print(f"train: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train(cfg: Config, data: ShardData, manifest: str, rank: int, world: int,
          device: torch.device) -> int:
    lake = Path(manifest).resolve().parent.parent
    out = Path(cfg.train.out) if cfg.train.out else lake / "train" / (cfg.preset or "run")
    ckpt_root = out / "checkpoints"
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    run_id = f"{out.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    quarantine = (Path(cfg.train.quarantine) if cfg.train.quarantine
                  else lake / "quarantine" / f"{run_id}.jsonl")

    # 1. Data: the run's fixed sample order. Its length is part of the order (the global
    #    shuffle depends on it), so a resumed run takes it from the checkpoint.
    resume_from = checkpoint.latest(ckpt_root) if cfg.train.resume else None
    saved: dict[str, Any] = {}
    if resume_from is not None:
        saved = json.loads((resume_from / checkpoint.STATE_FILE).read_text(encoding="utf-8"))
    g = cfg.data.global_batch
    num_samples = saved.get("num_samples", (cfg.train.steps + cfg.data.spare_batches) * g)
    seed = cfg.data.seed if cfg.data.seed >= 0 else int(data.manifest.seed or 0)
    if saved and saved.get("data_seed", seed) != seed:
        raise BadInput(f"data.seed {seed} differs from the checkpoint's {saved['data_seed']}")
    if saved and saved.get("global_batch", g) != g:
        raise BadInput(f"data.global_batch {g} differs from the checkpoint's "
                       f"{saved['global_batch']}: the sample order would change")
    try:
        plan = BatchPlan(data, cfg.data.seq_len, g, cfg.data.micro_batch, world, rank,
                         num_samples, seed)
    except ValueError as e:
        raise BadInput(str(e)) from None

    # 2. Model: built on the meta device (no memory), sharded, then given real storage and
    #    initialised shard by shard.
    cfg.model.vocab_size = cfg.model.vocab_size or data.vocab_size
    if cfg.model.vocab_size < data.vocab_size:
        raise BadInput(f"model.vocab_size {cfg.model.vocab_size} < tokenizer's {data.vocab_size}")
    torch.manual_seed(cfg.train.seed)
    with torch.device("meta"):
        model = Transformer(cfg.model)
    n_params = sum(p.numel() for p in model.parameters())
    shard_model(model, cfg, world, device)
    model.to_empty(device=device)
    model.init_weights(cfg.train.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
        eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay,
    )

    # 3. Guard, metrics, run state.
    detector, policy = SpikeDetector(cfg.guard), RecoveryPolicy(cfg.guard)
    logger = MetricsLogger(out, rank, cfg.metrics)
    timer = StepTimer()
    flops = flops_per_token(model.non_embedding_params(), cfg.model.n_layers,
                            cfg.model.n_heads, cfg.model.head_dim, cfg.data.seq_len)
    peak = peak_flops(device)
    state = {"step": 0, "consumed": 0, "skipped": [], "lr_scale": 1.0}
    checks = (_decoder(data), unigram_logprobs(data)) if cfg.guard.enabled else (None, None)

    def trainer_state() -> dict[str, Any]:
        return {**state, "num_samples": num_samples, "data_seed": seed, "global_batch": g,
                "world_size": world, "guard": detector.state_dict(),
                "policy": policy.state_dict(), "config": cfg.to_dict(), "manifest": manifest}

    def restore(path: Path) -> None:
        saved_state = checkpoint.load(path, model, optimizer)
        state["step"], state["consumed"] = saved_state["step"], saved_state["consumed"]
        detector.load_state_dict(saved_state["guard"])
        # Skipped batches, LR backoff and the rollback record only grow: what this process
        # decided since that checkpoint was written is kept.
        state["skipped"] = sorted(set(state["skipped"]) | set(saved_state["skipped"]))
        state["lr_scale"] = min(state["lr_scale"], saved_state["lr_scale"])
        if len(saved_state["policy"]["rollbacks"]) > len(policy.rollbacks):
            policy.load_state_dict(saved_state["policy"])

    def save(step: int) -> None:
        hook = _die if cfg.debug.exit_during_save == step else None
        path = checkpoint.save(ckpt_root, step, model, optimizer, trainer_state(),
                               cfg.checkpoint.keep, rank, before_commit=hook)
        logger.event(step, "checkpoint", path=str(path))

    decisions = out / DECISIONS
    if resume_from is not None:
        restore(resume_from)
        # Guard decisions taken after that checkpoint was written (a skipped batch, a lower
        # LR) survive a crash through the decisions file: a resumed run keeps them.
        if decisions.is_file():
            kept = json.loads(decisions.read_text(encoding="utf-8"))
            state["skipped"] = sorted(set(state["skipped"]) | set(kept["skipped"]))
            state["lr_scale"] = min(state["lr_scale"], kept["lr_scale"])
            if len(kept["policy"]["rollbacks"]) > len(policy.rollbacks):
                policy.load_state_dict(kept["policy"])
        logger.event(state["step"], "resumed", path=str(resume_from),
                     consumed=state["consumed"], saved_world_size=saved.get("world_size"),
                     world_size=world)
    else:
        if rank == 0:
            decisions.unlink(missing_ok=True)  # a fresh run: an earlier run's decisions go
        if cfg.checkpoint.every > 0:
            save(0)  # something to roll back to before the first periodic checkpoint
    if rank == 0:
        print(f"train: {n_params / 1e6:.2f}M parameters, {world} process(es) on {device.type}, "
              f"global batch {g} x {cfg.data.seq_len} tokens ({plan.grad_accum} accumulation "
              f"steps), sources {plan.index.names}, out {out}", flush=True)

    ledger = open(out / "steps.jsonl", "a", encoding="utf-8") if rank == 0 else None
    curve: list[tuple[int, float]] = []
    source_names = plan.index.names
    # Per-source training loss, summed over the steps since the last log line: a small
    # source may have no sample in a given step.
    window_loss, window_count = [0.0] * len(source_names), [0.0] * len(source_names)
    last_warning = -cfg.metrics.log_every

    # 4. The loop. One iteration = one optimizer step over global_batch samples, unless the
    #    guard rejects it.
    while state["step"] < cfg.train.steps:
        step = state["step"]
        while state["consumed"] in state["skipped"]:
            state["consumed"] += g
        start = state["consumed"]

        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg) * state["lr_scale"]
        loss_sum, src_loss, src_count, fingerprint = 0.0, [0.0] * len(source_names), \
            [0.0] * len(source_names), 0
        batch_rows = []
        model.train()
        for a in range(plan.grad_accum):
            timer.data_start()
            samples = plan.samples_of(start, a)
            rows = plan.tokens(samples)
            if start in cfg.debug.corrupt_samples:
                rows = garble(rows.shape, data.vocab_size, seed=int(samples[0]))
            batch_rows.append(rows)
            tokens = torch.from_numpy(rows).to(device, non_blocking=True)
            timer.data_end()
            per_sample = sample_losses(model, tokens)
            (per_sample.mean() / plan.grad_accum).backward()
            detached = per_sample.detach().float().cpu().tolist()
            loss_sum += sum(detached)
            for name, value in zip(plan.sources(samples), detached, strict=True):
                k = source_names.index(name)
                src_loss[k] += value
                src_count[k] += 1
            fingerprint += sum(zlib.crc32(r.tobytes()) for r in rows)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        totals = all_reduce_sum([loss_sum, float(fingerprint), *src_loss, *src_count], device)
        loss = totals[0] / g
        fingerprint = int(totals[1])
        src_loss_all = totals[2:2 + len(source_names)]
        src_count_all = totals[2 + len(source_names):]

        verdict = detector.check(loss, grad_norm) if cfg.guard.enabled else None
        if verdict is not None and verdict.kind == "spike":
            optimizer.zero_grad(set_to_none=True)  # the update is never applied
            rc = recover(cfg, step, start, loss, grad_norm, verdict, batch_rows, data, plan,
                         policy, logger, checks, rank, device, quarantine, run_id, state,
                         ckpt_root, restore)
            if rank == 0:
                write_text_atomic(decisions, json.dumps({"skipped": state["skipped"],
                                                         "lr_scale": state["lr_scale"],
                                                         "policy": policy.state_dict()}))
            if rc is not None:
                _close(logger, ledger)
                return rc
            continue

        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if verdict is not None:
            detector.record(loss)
            if verdict.kind == "warn" and step - last_warning >= cfg.metrics.log_every:
                # At most one warning line per log window: early large gradients would
                # otherwise print one every step.
                logger.event(step, "warning", reasons=verdict.reasons)
                last_warning = step
        state["consumed"] = start + g
        state["step"] = step = step + 1
        for k in range(len(source_names)):
            window_loss[k] += src_loss_all[k]
            window_count[k] += src_count_all[k]
        timer.step_end(g * cfg.data.seq_len)
        curve.append((step, loss))
        if ledger is not None:
            ledger.write(json.dumps({"step": step, "first_sample": start, "loss": loss,
                                     "grad_norm": grad_norm, "lr": optimizer.param_groups[0]["lr"],
                                     "batch_crc": fingerprint}) + "\n")
            ledger.flush()

        if step % cfg.metrics.log_every == 0 or step == cfg.train.steps:
            window = timer.window()
            tps = window.get("tokens_per_s")
            metrics = {"loss": loss, "grad_norm": grad_norm,
                       "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": tps,
                       "mfu": mfu(tps / world, flops, peak) if tps else None,
                       "data_wait_pct": window.get("data_wait_pct"),
                       **{f"loss/{n}": window_loss[k] / window_count[k]
                          for k, n in enumerate(source_names) if window_count[k]},
                       **memory_stats(device)}
            logger.log(step, metrics)
            window_loss, window_count = [0.0] * len(source_names), [0.0] * len(source_names)
        if cfg.data.val_every and (step % cfg.data.val_every == 0 or step == cfg.train.steps):
            validate(model, cfg, data, rank, world, device, logger, step)
        if cfg.checkpoint.every and step % cfg.checkpoint.every == 0:
            save(step)
        if cfg.debug.exit_after_step == step:
            _die()

    # 5. Done: a final checkpoint and the topology-free export.
    if cfg.checkpoint.every and state["step"] % cfg.checkpoint.every:
        save(state["step"])
    if cfg.checkpoint.export:
        path = checkpoint.export(out / "export" / "model.pt", model, _model_dict(cfg), rank,
                                 {"step": state["step"], "manifest": manifest,
                                  "tokenizer_sha256": data.manifest.tokenizer.get("sha256")})
        logger.event(state["step"], "exported", path=str(path) if path else None)
    if rank == 0 and curve:
        print("\nloss by step\n" + loss_curve(curve), flush=True)
    _close(logger, ledger)
    return 0


def recover(cfg: Config, step: int, start: int, loss: float, grad_norm: float, verdict: Any,
            batch_rows: list[np.ndarray], data: ShardData, plan: BatchPlan,
            policy: RecoveryPolicy, logger: MetricsLogger, checks: Any, rank: int,
            device: torch.device, quarantine: Path, run_id: str, state: dict[str, Any],
            ckpt_root: Path, restore: Any) -> int | None:
    """A loss spike: quarantine, then roll back and skip, roll back and lower the LR, or stop.

    Returns an exit code to stop with, or None to go on training from the restored state.
    """
    # Does the batch itself look wrong? Every rank checks its part; one bad part is enough.
    decode, unigram_logp = checks
    normal, why = batch_looks_normal(np.concatenate(batch_rows)[:, 1:], data.eos_id, cfg.guard,
                                     decode, unigram_logp)
    normal = all_reduce_sum([0.0 if normal else 1.0], device)[0] == 0
    action = policy.decide(step, normal)
    logger.event(step, "loss_spike", loss=loss, grad_norm=grad_norm, reasons=verdict.reasons,
                 batch_normal=normal, batch_reasons=why, first_sample=start, action=action.kind)
    if not normal and rank == 0:
        write_quarantine(quarantine, plan, start, step, run_id,
                         "; ".join(verdict.reasons + why))
        logger.event(step, "quarantined", path=str(quarantine))
    if action.kind == "stop":
        return stop(cfg, step, action.message, logger, rank, ckpt_root)
    target = checkpoint.latest(ckpt_root)
    if target is None:
        return stop(cfg, step, "loss spike and no checkpoint to roll back to "
                    "(checkpoint.every is 0)", logger, rank, ckpt_root)
    if action.kind == "rollback_skip":
        state["skipped"] = sorted(set(state["skipped"]) | {start})
    else:
        state["lr_scale"] *= action.lr_scale
    restore(target)
    logger.event(state["step"], "rolled_back", path=str(target), skipped_batch=start
                 if action.kind == "rollback_skip" else None, lr_scale=state["lr_scale"])
    return None


def write_quarantine(path: Path, plan: BatchPlan, start: int, step: int, run_id: str,
                     reason: str) -> None:
    """The documents of every sample in the offending global batch, for the pipeline."""
    from tokenmill.tokenize.quarantine import QuarantineEntry, write_entries

    samples = np.arange(start, start + plan.global_batch)
    entries = [QuarantineEntry(doc_id=d.doc_id, shard=d.shard, doc_index=d.doc_index,
                               source=d.source, reason=reason, step=step, train_run=run_id,
                               sample=i)
               for i, d in plan.documents(samples)]
    write_entries(path, entries)


def stop(cfg: Config, step: int, message: str, logger: MetricsLogger, rank: int,
         ckpt_root: Path) -> int:
    if rank == 0:
        last = checkpoint.latest(ckpt_root)
        record = {"step": step, "message": message,
                  "last_healthy_checkpoint": str(last) if last else None}
        (ckpt_root.parent / "stopped.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"train: STOPPED at step {step}: {message}", file=sys.stderr, flush=True)
    logger.event(step, "stopped", message=message)
    # Every rank returns only when rank 0's record is written: torchrun stops the others
    # as soon as one exits non-zero.
    dist.barrier()
    return EXIT_GUARD_STOP


@torch.no_grad()
def validate(model: Transformer, cfg: Config, data: ShardData, rank: int, world: int,
             device: torch.device, logger: MetricsLogger, step: int) -> None:
    """Loss on the held-out shards, per source and over all of them."""
    if not data.val_streams:
        return
    model.eval()
    metrics: dict[str, float | None] = {}
    total, count = 0.0, 0.0
    for source in sorted(data.val_streams):
        rows = validation_tokens(data, source, cfg.data.seq_len,
                                 cfg.data.val_batches * cfg.data.micro_batch, rank, world)
        s = 0.0
        for lo in range(0, len(rows), cfg.data.micro_batch):
            chunk = torch.from_numpy(rows[lo:lo + cfg.data.micro_batch]).to(device)
            s += float(sample_losses(model, chunk).sum())
        s, n = all_reduce_sum([s, float(len(rows))], device)
        if n:
            metrics[f"loss/{source}"] = s / n
            total, count = total + s, count + n
    if count:
        metrics["loss"] = total / count
        logger.log(step, metrics, prefix="val")
    model.train()


def _decoder(data: ShardData) -> Any:
    """Token ids → text with the run's tokenizer, for the garbled-text check.

    Optional: without sentencepiece or the model file the guard keeps its other checks.
    """
    try:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(data.tokenizer_path()))
    except Exception as e:  # noqa: BLE001 - missing package or file: the check goes without it
        log.warning("train: no tokenizer for the garbled-text check (%s); length and "
                    "repetition checks only", e)
        return None
    return lambda ids: sp.decode([int(i) for i in ids])


def _model_dict(cfg: Config) -> dict[str, Any]:
    return cfg.to_dict()["model"]


def _die() -> None:
    """Test hook: every rank dies at once, as a killed job would."""
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(17)


def _close(logger: MetricsLogger, ledger: Any) -> None:
    logger.close()
    if ledger is not None:
        ledger.close()


if __name__ == "__main__":
    raise SystemExit(main())

"""Sharded checkpoints with torch.distributed.checkpoint, committed by a rename.

Layout under ``<out>/checkpoints``::

    step-0000500/            a committed checkpoint: DCP files + trainer_state.json
    step-0001000.partial/    a save in progress (or one that died): never loaded

Every rank writes its shards into ``step-N.partial``; after a barrier rank 0 writes
``trainer_state.json`` (step, consumed samples, skipped batches, guard state...) into it and
renames the folder to ``step-N``. A crash at any point before the rename leaves only a
``.partial`` folder, which ``latest`` ignores and the next save removes, so the newest
committed checkpoint is always a complete one.

DCP stores each tensor with its global shape and the shards' offsets, and loading reshards
into whatever layout the model has now: a run saved by 2 processes resumes on 1 or 8.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

STATE_FILE = "trainer_state.json"
_COMMITTED = re.compile(r"^step-(\d{7,})$")


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def committed(root: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _COMMITTED.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest(root: Path) -> Path | None:
    found = committed(root)
    return found[-1][1] if found else None


def save(root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         trainer_state: dict[str, Any], keep: int, rank: int,
         before_commit: Callable[[], None] | None = None) -> Path:
    """Save and commit ``step-N``; keep the newest ``keep`` committed checkpoints."""
    final = root / f"step-{step:07d}"
    partial = root / f"step-{step:07d}.partial"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a rerun of the same step after a rollback
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(partial))
    _barrier()
    if before_commit is not None:
        before_commit()  # test hook: dies here, between the shard writes and the commit
    if rank == 0:
        with open(partial / STATE_FILE, "w", encoding="utf-8") as f:
            json.dump(trainer_state, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.rename(partial, final)
        _fsync_dir(root)
        # Prune: older committed checkpoints beyond `keep`, and dead partial saves.
        for _, old in committed(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        for p in root.glob("step-*.partial"):
            shutil.rmtree(p, ignore_errors=True)
    _barrier()
    return final


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load model and optimizer state in place (resharding as needed); return trainer state."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))


def export(path: Path, model: torch.nn.Module, model_config: dict[str, Any], rank: int,
           meta: dict[str, Any]) -> Path | None:
    """One ``torch.save`` file of the full, unsharded fp32 weights, on rank 0.

    Loads into an unsharded ``Transformer(ModelConfig(**model_config))`` with any process
    count: ``torch.load(path)["model"]``.
    """
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if rank != 0:
        _barrier()
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    torch.save({"model": full, "model_config": model_config, **meta}, tmp)
    os.replace(tmp, path)
    _barrier()
    return path

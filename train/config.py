"""Trainer configuration: one dataclass per section, a TOML preset, `--section.key=value`.

    torchrun ... train/train.py --manifest lake/shards/manifest.json --config tiny \\
        --train.steps=200 --optim.lr=1e-3 --guard.enabled=false

`--config` is a preset name (train/presets/<name>.toml) or a path to a TOML file. Presets set
only what differs from the defaults below. An unknown section or key, or a value of the wrong
type, is an error that names it.
"""

from __future__ import annotations

import tomllib
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tokenmill.train.guard import GuardConfig
from tokenmill.train.metrics import MetricsConfig
from tokenmill.train.model import ModelConfig

PRESETS = Path(__file__).resolve().parent / "presets"


@dataclass
class DataConfig:
    seq_len: int = 128
    global_batch: int = 16  # samples per optimizer step, over all ranks (kept on resume)
    micro_batch: int = 4  # samples per rank per forward; accumulation makes up the rest
    seed: int = -1  # -1: the manifest's seed
    # Spare samples in the fixed sample order beyond steps * global_batch: batches skipped
    # after a loss spike are replaced from here.
    spare_batches: int = 100
    # Validation: the last shard of every source with at least two shards is held out.
    holdout_last_shard: bool = True
    val_every: int = 50  # steps; 0 = never
    val_batches: int = 2  # micro-batches per rank per source


@dataclass
class OptimConfig:
    lr: float = 3e-4
    min_lr_ratio: float = 0.1  # cosine decays to lr * this
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0


@dataclass
class FsdpConfig:
    # zero3: parameters resharded after forward (least memory); zero2: kept gathered
    # between forward and backward (one all-gather less per step, more memory).
    mode: str = "zero3"
    mixed_precision: str = "auto"  # auto: bf16 params with fp32 reduction on GPU, fp32 on CPU
    compile: bool = False  # torch.compile each block


@dataclass
class CheckpointConfig:
    every: int = 500  # steps; 0 = never (no rollback possible then)
    keep: int = 3
    export: bool = True  # a single topology-free file at the end of training


@dataclass
class TrainRunConfig:
    steps: int = 100
    out: str = ""  # default: <lake root>/train/<preset>
    seed: int = 0  # model initialisation
    device: str = "auto"  # auto: cuda when available, else cpu
    resume: bool = True  # continue from the newest checkpoint under out/checkpoints
    # Where the documents of batches dropped after a loss spike are written (JSON lines);
    # default <lake root>/quarantine/<run>.jsonl, which tokenize_shards reads on its next run.
    quarantine: str = ""


@dataclass
class DebugConfig:
    """Test hooks. Each one makes a real failure happen; none is on by default."""

    # Replace the batch that starts at these global sample indices with uniformly random
    # token ids (the "garbled batch" a loss spike comes from).
    corrupt_samples: list[int] = field(default_factory=list)
    exit_after_step: int = -1  # all ranks die (os._exit) after this step completes
    exit_during_save: int = -1  # all ranks die mid-way through the checkpoint of this step


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    train: TrainRunConfig = field(default_factory=TrainRunConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    preset: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _coerce(where: str, raw: Any, kind: Any) -> Any:
    """A TOML value or a command-line string as the field's type."""
    origin = typing.get_origin(kind)
    if origin is list:
        (item,) = typing.get_args(kind)
        if isinstance(raw, str):
            raw = [x for x in raw.replace("[", "").replace("]", "").split(",") if x.strip()]
        if not isinstance(raw, list):
            raise ValueError(f"{where}: expected a list, got {raw!r}")
        return [_coerce(where, x, item) for x in raw]
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "on", "false", "0", "no",
                                                    "off"):
            return raw.lower() in ("true", "1", "yes", "on")
        raise ValueError(f"{where}: expected true or false, got {raw!r}")
    if kind is int:
        if isinstance(raw, bool):
            raise ValueError(f"{where}: expected an integer, got {raw!r}")
        try:
            value = int(raw) if not isinstance(raw, float) else None
        except ValueError:
            value = None
        if value is None:
            raise ValueError(f"{where}: expected an integer, got {raw!r}")
        return value
    if kind is float:
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {raw!r}") from None
    if kind is str:
        return str(raw)
    raise ValueError(f"{where}: unsupported type {kind}")


def _set(cfg: Config, section: str, key: str, raw: Any, where: str) -> None:
    sections = {f.name for f in fields(cfg) if f.name != "preset"}
    if section not in sections:
        have = ", ".join(sorted(sections))
        raise ValueError(f"{where}: unknown section {section!r} (have: {have})")
    obj = getattr(cfg, section)
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in fields(obj)}
    if key not in names:
        raise ValueError(f"{where}: unknown key {section}.{key} (have: {', '.join(sorted(names))})")
    setattr(obj, key, _coerce(f"{where} {section}.{key}", raw, hints[key]))


def load_config(preset: str | None, overrides: list[str]) -> Config:
    """Defaults, then the preset file, then the `--section.key=value` overrides, in order."""
    cfg = Config()
    if preset:
        path = Path(preset)
        if not path.suffix:
            path = PRESETS / f"{preset}.toml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in PRESETS.glob("*.toml")))
            raise ValueError(f"no preset {preset!r} (a TOML file, or one of: {known})")
        with open(path, "rb") as f:
            try:
                doc = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise ValueError(f"{path}: {e}") from None
        for section, values in doc.items():
            if not isinstance(values, dict):
                raise ValueError(f"{path}: top-level key {section!r} must be a [section]")
            for key, raw in values.items():
                _set(cfg, section, key, raw, str(path))
        cfg.preset = path.stem
    for item in overrides:
        if not item.startswith("--") or "=" not in item or "." not in item.split("=", 1)[0]:
            raise ValueError(f"override {item!r}: expected --section.key=value")
        name, raw = item[2:].split("=", 1)
        section, key = name.split(".", 1)
        _set(cfg, section, key, raw, "override")
    check(cfg)
    return cfg


def check(cfg: Config) -> None:
    """Reject values that would fail later and less clearly."""
    d, o = cfg.data, cfg.optim
    positive = {
        "data.seq_len": d.seq_len, "data.global_batch": d.global_batch,
        "data.micro_batch": d.micro_batch, "train.steps": cfg.train.steps,
        "model.dim": cfg.model.dim, "model.n_layers": cfg.model.n_layers,
        "model.n_heads": cfg.model.n_heads, "checkpoint.keep": cfg.checkpoint.keep,
        "optim.lr": o.lr, "metrics.log_every": cfg.metrics.log_every,
    }
    for name, value in positive.items():
        if value <= 0:
            raise ValueError(f"{name}: must be > 0, got {value}")
    if cfg.fsdp.mode not in ("zero2", "zero3"):
        raise ValueError(f"fsdp.mode: zero2 or zero3, got {cfg.fsdp.mode!r}")
    if cfg.fsdp.mixed_precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"fsdp.mixed_precision: auto, bf16 or fp32, got "
                         f"{cfg.fsdp.mixed_precision!r}")
    if d.seq_len > cfg.model.max_seq_len:
        raise ValueError(f"data.seq_len {d.seq_len} > model.max_seq_len {cfg.model.max_seq_len}")
    if not 0 <= o.min_lr_ratio <= 1:
        raise ValueError(f"optim.min_lr_ratio: must be in [0, 1], got {o.min_lr_ratio}")
    if cfg.train.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"train.device: auto, cpu or cuda, got {cfg.train.device!r}")

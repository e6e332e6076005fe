"""The JSON manifest of a shard set: which shards, which sources, which mixture weights.

A trainer reads only the manifest and the shards it lists, so the manifest pins everything
the token stream depends on: the tokenizer (by hash), the Delta table versions the shards
were cut from, each shard's counts, and the normalised source weights.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenmill.tokenize.files import write_text_atomic

MANIFEST_VERSION = 1

# LLaMA-2-style mixture shares (the seed's table). The pipeline's Common Crawl source is
# named "cc". "other" is a pool shared by present sources that have no weight of their own.
DEFAULT_WEIGHTS: dict[str, float] = {
    "cc": 0.67,
    "github": 0.045,
    "wikipedia": 0.045,
    "books": 0.045,
    "arxiv": 0.025,
    "stackexchange": 0.02,
    "other": 0.15,
}
OTHER = "other"

_SHARD_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16")


@dataclass
class ShardEntry:
    """One shard. ``path`` is the shard prefix (no .bin/.idx), relative to the manifest."""

    path: str
    source: str
    documents: int
    tokens: int
    dtype: str
    idx_sha256: str | None = None


@dataclass
class Manifest:
    tokenizer: dict[str, Any]  # {"path", "sha256", "vocab_size", "eos_id"}
    sources: dict[str, dict[str, Any]]  # source -> {"documents", "tokens", "weight"}
    weights: dict[str, float]  # normalised to sum 1
    shards: list[ShardEntry]
    inputs: dict[str, int] = field(default_factory=dict)  # Delta table -> version read
    created_at: str = ""
    seed: int | None = None
    version: int = MANIFEST_VERSION

    def source_tokens(self) -> dict[str, int]:
        return {name: int(info["tokens"]) for name, info in self.sources.items()}

    def shards_of(self, source: str) -> list[ShardEntry]:
        """The source's shards in manifest order (the order of its concatenated stream)."""
        return [s for s in self.shards if s.source == source]


def _fmt(w: float) -> str:
    return f"{w:.4g}"


def resolve_weights(
    available: Mapping[str, int], weights: Mapping[str, float] | None = None
) -> tuple[dict[str, float], list[str]]:
    """Fit mixture weights to the sources actually present.

    ``available`` maps source -> tokens; a source with no tokens counts as missing. Weighted
    sources that are missing are dropped. The ``"other"`` weight is split evenly among present
    sources without a weight of their own (and a present source literally named "other");
    if there is no "other" weight, such sources get 0. The result is renormalised to sum 1.
    Returns the weights of every present source (in ``available`` order) and the warnings.
    """
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    for name, w in weights.items():
        if not (isinstance(w, int | float) and math.isfinite(w) and w >= 0):
            raise ValueError(f"weight for {name!r} must be a finite number >= 0, got {w!r}")
    warnings: list[str] = []
    present = [name for name, tokens in available.items() if tokens > 0]
    for name, tokens in available.items():
        if tokens <= 0:
            warnings.append(f"source {name!r} has no tokens; treated as missing")

    pool = float(weights.get(OTHER, 0.0))
    # Sources the "other" pool feeds: present ones without an explicit weight, plus a real
    # source called "other" (whose own weight *is* the pool).
    pooled = [name for name in present if name not in weights or name == OTHER]
    resolved: dict[str, float] = {}
    for name in present:
        if name in pooled:
            continue
        resolved[name] = float(weights[name])
    if pooled:
        share = pool / len(pooled)
        for name in pooled:
            resolved[name] = share
        if pool == 0:
            warnings.append(
                f"sources without a weight and no 'other' share: {', '.join(pooled)}; weight 0"
            )
        elif pooled != [OTHER]:
            warnings.append(
                f"'other' weight {_fmt(pool)} split evenly among {', '.join(pooled)}"
            )
    for name, w in weights.items():
        if name in present:
            continue
        if name == OTHER:
            if w > 0 and not pooled:
                warnings.append(f"'other' weight {_fmt(w)} dropped: no unweighted source present")
        elif w > 0:
            warnings.append(f"source {name!r} (weight {_fmt(w)}) is missing; dropped")

    total = sum(resolved.values())
    if total <= 0:
        raise ValueError(
            f"no weighted source remains (available: {sorted(available)}, "
            f"weights: {sorted(weights)})"
        )
    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-9):
        warnings.append(f"weights of present sources sum to {_fmt(total)}; renormalised to 1")
    ordered = {name: resolved[name] / total for name in present}
    return ordered, warnings


def build_manifest(
    shards: Iterable[ShardEntry],
    tokenizer: Mapping[str, Any],
    weights: Mapping[str, float] | None = None,
    inputs: Mapping[str, int] | None = None,
    seed: int | None = None,
) -> tuple[Manifest, list[str]]:
    """Aggregate shard entries into a manifest, resolving the weights against them."""
    shards = list(shards)
    sources: dict[str, dict[str, Any]] = {}
    for entry in shards:
        info = sources.setdefault(entry.source, {"documents": 0, "tokens": 0, "weight": 0.0})
        info["documents"] += entry.documents
        info["tokens"] += entry.tokens
    resolved, warnings = resolve_weights(
        {name: info["tokens"] for name, info in sources.items()}, weights
    )
    for name, info in sources.items():
        info["weight"] = resolved.get(name, 0.0)
    manifest = Manifest(
        tokenizer=dict(tokenizer),
        sources=sources,
        weights=resolved,
        shards=shards,
        inputs=dict(inputs or {}),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seed=seed,
    )
    return manifest, warnings


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(manifest: Manifest, path: str | Path) -> None:
    """Write atomically: a reader sees the old manifest or the new one, never half of one."""
    path = Path(path)
    _validate(manifest, str(path))
    text = json.dumps(asdict(manifest), indent=2, sort_keys=False) + "\n"
    write_text_atomic(path, text)


def shard_prefix(manifest_path: str | Path, entry: ShardEntry) -> Path:
    """The absolute shard prefix of an entry of the manifest stored at ``manifest_path``."""
    return Path(manifest_path).resolve().parent / entry.path


def read_manifest(
    path: str | Path, check_files: bool = True, verify_hashes: bool = False
) -> Manifest:
    """Read and validate a manifest.

    ``check_files`` requires every shard's .bin and .idx to exist beside the manifest;
    ``verify_hashes`` also re-hashes each .idx that has a recorded sha256.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a manifest is a JSON object")
    version = raw.get("version")
    if version != MANIFEST_VERSION:
        raise ValueError(
            f"{path}: unsupported manifest version {version!r} (this reader knows "
            f"{MANIFEST_VERSION})"
        )
    try:
        shards = [ShardEntry(**s) for s in raw["shards"]]
        manifest = Manifest(
            tokenizer=raw["tokenizer"],
            sources=raw["sources"],
            weights={k: float(v) for k, v in raw["weights"].items()},
            shards=shards,
            inputs=raw.get("inputs", {}),
            created_at=raw.get("created_at", ""),
            seed=raw.get("seed"),
            version=version,
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: malformed manifest ({e!r})") from e
    _validate(manifest, str(path))
    if check_files:
        missing = []
        for entry in manifest.shards:
            prefix = shard_prefix(path, entry)
            for suffix in (".bin", ".idx"):
                if not Path(f"{prefix}{suffix}").exists():
                    missing.append(f"{entry.path}{suffix}")
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise FileNotFoundError(
                f"{path}: {len(missing)} shard file(s) missing next to the manifest: {shown}"
            )
        if verify_hashes:
            for entry in manifest.shards:
                if entry.idx_sha256 is None:
                    continue
                got = file_sha256(f"{shard_prefix(path, entry)}.idx")
                if got != entry.idx_sha256:
                    raise ValueError(f"{path}: {entry.path}.idx sha256 {got} != recorded")
    return manifest


def _validate(manifest: Manifest, where: str) -> None:
    for key in ("path", "sha256", "vocab_size", "eos_id"):
        if key not in manifest.tokenizer:
            raise ValueError(f"{where}: tokenizer lacks {key!r}")
    totals: dict[str, list[int]] = {}
    for entry in manifest.shards:
        if Path(entry.path).is_absolute() or ".." in Path(entry.path).parts:
            # Relative paths keep a shard set movable (local disk <-> object store).
            raise ValueError(f"{where}: shard path {entry.path!r} must be relative, inside")
        if entry.source not in manifest.sources:
            raise ValueError(f"{where}: shard {entry.path} has unlisted source {entry.source!r}")
        if entry.dtype not in _SHARD_DTYPES:
            raise ValueError(f"{where}: shard {entry.path} has unknown dtype {entry.dtype!r}")
        t = totals.setdefault(entry.source, [0, 0])
        t[0] += entry.documents
        t[1] += entry.tokens
    for name, info in manifest.sources.items():
        docs, tokens = totals.get(name, [0, 0])
        if (int(info.get("documents", -1)), int(info.get("tokens", -1))) != (docs, tokens):
            raise ValueError(
                f"{where}: source {name!r} lists {info.get('documents')} documents / "
                f"{info.get('tokens')} tokens, its shards sum to {docs} / {tokens}"
            )
    for name, w in manifest.weights.items():
        if name not in manifest.sources:
            raise ValueError(f"{where}: weight for unknown source {name!r}")
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"{where}: weight for {name!r} is {w}")
    total = sum(manifest.weights.values())
    if manifest.weights and not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"{where}: weights sum to {total}, not 1")


def epochs_for_budget(manifest: Manifest, token_budget: int) -> dict[str, float]:
    """Passes over each source that a training budget of ``token_budget`` tokens implies."""
    out: dict[str, float] = {}
    for name, w in manifest.weights.items():
        tokens = int(manifest.sources[name]["tokens"])
        wanted = token_budget * w
        out[name] = wanted / tokens if tokens else (math.inf if wanted > 0 else 0.0)
    return out

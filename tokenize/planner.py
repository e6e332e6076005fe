"""Chinchilla planner: model size, token budget, training time and cost, epochs per source.

    python -m tokenmill.tokenize.planner --params 7e9 [--manifest shards/manifest.json]
    python -m tokenmill.tokenize.planner --compute 1e23 --gpu A100 --gpus 64

Rules of thumb (Hoffmann et al. 2022, "Chinchilla", as rounded in the project seed):

* compute-optimal tokens for N parameters: D = 20 N;
* for a compute budget of C FLOPs: N_opt = C**0.5 / 8.7 and D_opt = 1.75 * C**0.5;
* training FLOPs = 6 N D (forward + backward, dense transformer, attention ignored).

The two C-based figures are the seed's rounded ones and are not consistent with C = 6 N D:
6 * (C**0.5 / 8.7) * (1.75 * C**0.5) = 1.207 C, and D_opt / N_opt = 15.2, not 20. They are
used as given; with D = 20 N and C = 6 N D exactly, N = (C / 120)**0.5 = C**0.5 / 10.95.
The table therefore shows both the input budget and 6 N D.

Hardware defaults are assumptions, every one overridable by a flag: bf16 dense peak FLOP/s
from NVIDIA's datasheets (A100 312 TFLOP/s, H100 SXM 989, H200 989 - the same compute as an
H100), on-demand cloud prices per GPU-hour that vary widely by provider and commitment, MFU
0.40 and 8 GPUs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenmill.tokenize.manifest import epochs_for_budget, read_manifest

TOKENS_PER_PARAM = 20.0
N_OPT_DIVISOR = 8.7  # N_opt = C**0.5 / 8.7   (seed figure)
D_OPT_FACTOR = 1.75  # D_opt = C**0.5 * 1.75  (seed figure)
FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True)
class GPU:
    name: str
    peak_flops: float  # bf16 dense FLOP/s
    price_per_hour: float  # USD per GPU-hour: an assumption, not a quote


GPUS: dict[str, GPU] = {
    "A100": GPU("A100", 312e12, 1.8),
    "H100": GPU("H100 SXM", 989e12, 2.5),
    "H200": GPU("H200", 989e12, 3.5),
}
DEFAULT_GPU = "H100"
DEFAULT_GPUS = 8
DEFAULT_MFU = 0.40


def chinchilla_tokens(params: float) -> float:
    """Compute-optimal training tokens for a model of ``params`` parameters (D = 20 N)."""
    return TOKENS_PER_PARAM * params


def compute_optimal(compute: float) -> tuple[float, float]:
    """``(N_opt, D_opt)`` for a budget of ``compute`` FLOPs, by the seed's rounded formulas."""
    root = compute**0.5
    return root / N_OPT_DIVISOR, root * D_OPT_FACTOR


def training_flops(params: float, tokens: float) -> float:
    return FLOPS_PER_PARAM_TOKEN * params * tokens


def training_seconds(flops: float, gpus: int, peak_flops: float, mfu: float) -> float:
    return flops / (gpus * peak_flops * mfu)


@dataclass
class Plan:
    params: float
    tokens: float
    flops: float
    compute_budget: float | None
    gpu: str
    gpus: int
    peak_flops: float
    mfu: float
    price_per_hour: float
    seconds: float
    epochs: dict[str, float] = field(default_factory=dict)

    @property
    def days(self) -> float:
        return self.seconds / 86_400

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3_600 * self.gpus

    @property
    def cost(self) -> float:
        return self.gpu_hours * self.price_per_hour


def plan(
    params: float | None = None,
    compute: float | None = None,
    gpu: str = DEFAULT_GPU,
    gpus: int = DEFAULT_GPUS,
    mfu: float = DEFAULT_MFU,
    price: float | None = None,
    peak_flops: float | None = None,
    manifest_path: str | None = None,
) -> Plan:
    """Plan a run from a model size or a compute budget (exactly one of them)."""
    if (params is None) == (compute is None):
        raise ValueError("give exactly one of params and compute")
    if gpus <= 0 or not 0 < mfu <= 1:
        raise ValueError("gpus must be positive and mfu in (0, 1]")
    key = gpu.upper()
    if key not in GPUS and (peak_flops is None or price is None):
        raise ValueError(f"unknown GPU {gpu!r} (known: {', '.join(GPUS)}); or give peak and price")
    spec = GPUS.get(key, GPU(gpu, 0.0, 0.0))
    peak = spec.peak_flops if peak_flops is None else peak_flops
    hourly = spec.price_per_hour if price is None else price
    if params is not None:
        n, d = float(params), chinchilla_tokens(params)
    else:
        n, d = compute_optimal(float(compute))  # type: ignore[arg-type]
    flops = training_flops(n, d)
    result = Plan(
        params=n,
        tokens=d,
        flops=flops,
        compute_budget=compute,
        gpu=spec.name,
        gpus=gpus,
        peak_flops=peak,
        mfu=mfu,
        price_per_hour=hourly,
        seconds=training_seconds(flops, gpus, peak, mfu),
    )
    if manifest_path is not None:
        manifest = read_manifest(manifest_path, check_files=False)
        result.epochs = epochs_for_budget(manifest, int(d))
    return result


def format_plan(p: Plan) -> str:
    rows = [
        ("parameters N", f"{p.params:.3e}"),
        ("tokens D", f"{p.tokens:.3e}"),
    ]
    if p.compute_budget is not None:
        rows.append(("compute budget C", f"{p.compute_budget:.3e} FLOPs"))
    rows += [
        ("training FLOPs 6ND", f"{p.flops:.3e}"),
        (
            "hardware",
            f"{p.gpus} x {p.gpu}, {p.peak_flops / 1e12:.0f} TFLOP/s bf16, MFU {p.mfu:.2f}",
        ),
        ("time", f"{p.days:,.1f} days ({p.gpu_hours:,.0f} GPU-hours)"),
        ("cost", f"${p.cost:,.0f} at ${p.price_per_hour:.2f}/GPU-hour (assumed)"),
    ]
    for source, e in p.epochs.items():
        rows.append((f"epochs {source}", f"{e:.3f}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if p.compute_budget is not None:
        lines.append(
            "note: the seed's rounded N_opt/D_opt give 6ND = 1.21 C; the budget is exceeded "
            "by that factor"
        )
    if any(e > 1 for e in p.epochs.values()):
        lines.append("note: sources above 1 epoch are repeated")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group(required=True)
    size.add_argument("--params", type=float, help="model parameters N, e.g. 7e9")
    size.add_argument("--compute", type=float, help="compute budget C in FLOPs, e.g. 1e23")
    ap.add_argument("--manifest", help="shard manifest: epochs implied per source")
    ap.add_argument("--gpu", default=DEFAULT_GPU, help=f"one of {', '.join(GPUS)}")
    ap.add_argument("--gpus", type=int, default=DEFAULT_GPUS, help="GPU count")
    ap.add_argument("--mfu", type=float, default=DEFAULT_MFU, help="model FLOPs utilisation")
    ap.add_argument("--price", type=float, help="USD per GPU-hour (default: the GPU's)")
    ap.add_argument("--peak-flops", type=float, help="peak FLOP/s per GPU (default: the GPU's)")
    args = ap.parse_args(argv)
    try:
        result = plan(
            params=args.params,
            compute=args.compute,
            gpu=args.gpu,
            gpus=args.gpus,
            mfu=args.mfu,
            price=args.price,
            peak_flops=args.peak_flops,
            manifest_path=args.manifest,
        )
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    print(format_plan(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the trainer measures and where it goes: throughput, MFU, memory; stdout, JSONL,
TensorBoard and Prometheus.

The numbers are the ones an engineer acts on: loss, grad norm, LR, tokens/s, MFU, the share
of wall time spent waiting for data, and memory. Every log line goes to stdout (the record a
person reads) and to `<out_dir>/metrics.jsonl` (the record a script reads). TensorBoard and the
Prometheus endpoint are optional: when their package is missing the logger says so once and
goes on without them, so the trainer never needs them installed.
"""

from __future__ import annotations

import json
import math
import re
import resource
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# --- model FLOPs utilisation ----------------------------------------------------------------

# Dense bf16 tensor-core peak per GPU, from NVIDIA's datasheets (the figures without
# sparsity, which the datasheets print at twice these values). H200 has H100 SXM's compute,
# only more and faster memory. Matched as substrings of torch.cuda.get_device_name(), in
# order, so "H100 PCIe" must come before the generic "H100".
PEAK_BF16_FLOPS: dict[str, float] = {
    "A100": 312e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "H200": 989e12,
}


def peak_flops(device: torch.device) -> float | None:
    """The dense bf16 peak of `device`, or None on CPU or a GPU not in PEAK_BF16_FLOPS."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).upper()
    for model, flops in PEAK_BF16_FLOPS.items():
        if model.upper() in name:
            return flops
    return None


def flops_per_token(
    n_params: int, n_layers: int, n_heads: int, head_dim: int, seq_len: int
) -> float:
    """Training FLOPs per token, forward and backward: 6*N + 12*L*H*Q*T (PaLM, appendix B).

    6*N: every weight matrix does one multiply-add (2 FLOPs) per token in the forward pass and
    two in the backward (gradients for the input and for the weight). N excludes the token
    embedding table: the input embedding is a lookup (a gather of one row per token, and in
    the backward a scatter-add of gradient rows), with no multiply-adds, so counting its V*D
    parameters would inflate MFU by a model-size-dependent amount. The output projection is a
    real matmul and counts, also when its weight is tied to the embedding table.

    12*L*H*Q*T: the attention scores (Q K^T) and the weighted sum over values, each 2*T*Q
    FLOPs per token per head forward, times 3 for forward plus backward. As in PaLM this counts
    the full T x T score matrix even though a causal mask only needs half of it, so MFU figures
    stay comparable with published ones.
    """
    return 6.0 * n_params + 12.0 * n_layers * n_heads * head_dim * seq_len


def mfu(tokens_per_s_per_device: float, flops_per_token: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction of `peak` (0.4 means 40%); None without a peak."""
    if peak is None or peak <= 0:
        return None
    return tokens_per_s_per_device * flops_per_token / peak


# --- memory ---------------------------------------------------------------------------------


def memory_stats(device: torch.device) -> dict[str, float]:
    """Peak memory since the last call, in GiB.

    On CUDA: `mem_peak_gib` (peak allocated by tensors) and `mem_reserved_peak_gib` (peak held
    by the caching allocator, what the GPU actually lost), and the peaks are reset so each log
    window reports its own. On CPU: `mem_peak_gib` is the process's max resident set size,
    which the OS keeps for the whole process lifetime and cannot be reset.
    """
    gib = float(2**30)
    if device.type == "cuda":
        stats = {
            "mem_peak_gib": torch.cuda.max_memory_allocated(device) / gib,
            "mem_reserved_peak_gib": torch.cuda.max_memory_reserved(device) / gib,
        }
        torch.cuda.reset_peak_memory_stats(device)
        return stats
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    rss_bytes = max_rss if sys.platform == "darwin" else max_rss * 1024
    return {"mem_peak_gib": rss_bytes / gib}


# --- throughput and data wait ---------------------------------------------------------------


class StepTimer:
    """Wall time, tokens and time spent waiting for data over a window of steps.

    Use as:
        with timer.waiting_for_data():
            batch = next(batches)
        ...forward, backward, step...
        timer.step_end(tokens=batch.numel())
        if step % log_every == 0:
            loss = loss.item()          # syncs the GPU, so the window's wall time is real
            stats = timer.window()

    CUDA kernels run asynchronously, so per-step host time says little; over a window that
    ends on a sync, the total is exact. Data wait is host time blocked on the data loader,
    the time a faster loader would give back.
    """

    def __init__(self) -> None:
        self._window_start = time.perf_counter()
        self._data_wait_s = 0.0
        self._data_start: float | None = None
        self._tokens = 0
        self._steps = 0

    def data_start(self) -> None:
        self._data_start = time.perf_counter()

    def data_end(self) -> None:
        if self._data_start is None:
            raise RuntimeError("data_end() without data_start()")
        self._data_wait_s += time.perf_counter() - self._data_start
        self._data_start = None

    @contextmanager
    def waiting_for_data(self) -> Iterator[None]:
        self.data_start()
        try:
            yield
        finally:
            self.data_end()

    def step_end(self, tokens: int) -> None:
        self._tokens += int(tokens)
        self._steps += 1

    def window(self) -> dict[str, float | None]:
        """tokens_per_s, data_wait_pct and step_time_s (None if no step ended) since the last
        window, then starts a new one."""
        now = time.perf_counter()
        data_wait_s = self._data_wait_s
        if self._data_start is not None:
            # Called mid-wait: this window keeps the wait so far, the next one the rest.
            data_wait_s += now - self._data_start
            self._data_start = now
        elapsed = max(now - self._window_start, 1e-9)
        stats = {
            "tokens_per_s": self._tokens / elapsed,
            "data_wait_pct": 100.0 * data_wait_s / elapsed,
            "step_time_s": elapsed / self._steps if self._steps else None,
        }
        self._window_start, self._data_wait_s, self._tokens, self._steps = now, 0.0, 0, 0
        return stats


# --- the sinks ------------------------------------------------------------------------------


@dataclass
class MetricsConfig:
    log_every: int = 10
    tensorboard: bool = True
    prometheus_port: int = 0  # 0 = no endpoint

    def __post_init__(self) -> None:
        if self.log_every < 1:
            raise ValueError(f"metrics.log_every must be >= 1 (got {self.log_every})")
        if not 0 <= self.prometheus_port <= 65535:
            raise ValueError(
                f"metrics.prometheus_port must be 0 (off) or a TCP port (got "
                f"{self.prometheus_port})"
            )


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


# How the human line shows the metrics it knows: (label, format). Others use their own name
# and 4 significant digits.
_HUMAN_FORMAT: dict[str, tuple[str, str]] = {
    "loss": ("loss", "{:.4f}"),
    "grad_norm": ("grad_norm", "{:.2f}"),
    "lr": ("lr", "{:.1e}"),
    "tokens_per_s": ("tok/s", "{:,.0f}"),
    "mfu": ("mfu", "{:.1%}"),
    "data_wait_pct": ("data_wait", "{:.1f}%"),
    "step_time_s": ("step_time", "{:.3f}s"),
    "mem_peak_gib": ("mem", "{:.1f} GiB"),
    "mem_reserved_peak_gib": ("mem_reserved", "{:.1f} GiB"),
}


def _human(name: str, value: float | None) -> str:
    label, fmt = _HUMAN_FORMAT.get(name, (name, "{:.4g}"))
    if value is None:
        return f"{label} n/a"
    return f"{label} {fmt.format(value)}"


def _json_value(value: Any) -> Any:
    """JSON for one field: numbers as floats, NaN/inf as null (strict JSON has no NaN)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if hasattr(value, "__float__"):  # float, numpy scalar, 0-d tensor
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


class _PrometheusEndpoint:
    """Gauges on an HTTP endpoint for Prometheus to scrape, one per metric name."""

    def __init__(self, client: Any, registry: Any, server: Any) -> None:
        self.client, self.registry, self.server = client, registry, server
        self.gauges: dict[str, Any] = {}
        self.events = client.Counter(
            "tokenmill_events", "Notable trainer events (spike, rollback, ...)", ["kind"],
            registry=registry,
        )

    @classmethod
    def start(cls, port: int) -> _PrometheusEndpoint | None:
        try:
            import prometheus_client
        except ImportError:
            _warn_once(
                "prometheus_client",
                "prometheus_client is not installed: no metrics endpoint "
                "(pip install prometheus-client, or set metrics.prometheus_port = 0)",
            )
            return None
        # A registry of our own, not the process-wide default: two loggers in one process
        # (tests, a notebook) would otherwise collide on the gauge names.
        registry = prometheus_client.CollectorRegistry()
        try:
            started = prometheus_client.start_http_server(port, registry=registry)
        except OSError as e:
            _warn_once("prometheus_port", f"cannot serve metrics on port {port}: {e}")
            return None
        # prometheus_client before 0.20 returns None instead of (server, thread).
        return cls(prometheus_client, registry, started[0] if started else None)

    def set(self, metric: str, value: float) -> None:
        metric = re.sub(r"[^a-zA-Z0-9_]", "_", metric)
        if metric not in self.gauges:
            self.gauges[metric] = self.client.Gauge(metric, metric, registry=self.registry)
        self.gauges[metric].set(value)

    def count_event(self, kind: str) -> None:
        self.events.labels(kind=kind).inc()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class MetricsLogger:
    """Writes metrics to stdout, `<out_dir>/metrics.jsonl`, TensorBoard and Prometheus.

    Only rank 0 writes anything; on other ranks every method is a no-op, so the trainer can
    call it unconditionally. The JSONL file is appended to, so a resumed run continues it
    (after a rollback, steps repeat; the "rollback" event line says why).
    """

    def __init__(self, out_dir: str | Path, rank: int, cfg: MetricsConfig) -> None:
        self.out_dir = Path(out_dir)
        self.cfg = cfg
        self.active = rank == 0
        self._jsonl = None
        self._tensorboard = None
        self._prometheus: _PrometheusEndpoint | None = None
        if not self.active:
            return

        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.out_dir / "metrics.jsonl", "a", encoding="utf-8")

        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                _warn_once(
                    "tensorboard",
                    "tensorboard is not installed: no TensorBoard logs "
                    "(pip install tensorboard, or set metrics.tensorboard = false)",
                )
            else:
                self._tensorboard = SummaryWriter(log_dir=str(self.out_dir / "tensorboard"))

        if cfg.prometheus_port:
            self._prometheus = _PrometheusEndpoint.start(cfg.prometheus_port)

    def _write_json(self, record: dict[str, Any]) -> None:
        assert self._jsonl is not None
        self._jsonl.write(json.dumps(record) + "\n")
        # Flushed per line: a crashed run's last lines are the ones that explain the crash.
        self._jsonl.flush()

    def log(self, step: int, metrics: dict[str, float | None], prefix: str = "train") -> None:
        if not self.active:
            return
        values = {name: _json_value(v) for name, v in metrics.items()}

        head = f"step {step:>5}" if prefix == "train" else f"{prefix} step {step:>5}"
        print(" | ".join([head] + [_human(n, v) for n, v in values.items()]), flush=True)

        self._write_json({"step": step, "kind": prefix, "time": round(time.time(), 3), **values})

        if self._tensorboard is not None:
            for name, value in values.items():
                if value is not None:
                    self._tensorboard.add_scalar(f"{prefix}/{name}", value, step)
            self._tensorboard.flush()

        if self._prometheus is not None:
            self._prometheus.set(f"tokenmill_{prefix}_step", step)
            for name, value in values.items():
                if value is not None:
                    self._prometheus.set(f"tokenmill_{prefix}_{name}", value)

    def event(self, step: int, kind: str, **fields: Any) -> None:
        """A notable event (spike, rollback, checkpoint, stop): one printed line, one JSON line
        with this `kind`, and a count on the Prometheus endpoint."""
        if not self.active:
            return
        values = {name: _json_value(v) for name, v in fields.items()}
        details = " ".join(f"{name}={json.dumps(v)}" for name, v in values.items())
        print(f"step {step:>5} | {kind.upper()} {details}".rstrip(), flush=True)
        self._write_json({"step": step, "kind": kind, "time": round(time.time(), 3), **values})
        if self._prometheus is not None:
            self._prometheus.count_event(kind)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._prometheus is not None:
            self._prometheus.close()
            self._prometheus = None
        self.active = False

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- a loss curve for the terminal ----------------------------------------------------------


def loss_curve(points: list[tuple[int, float]], width: int = 60, height: int = 12) -> str:
    """An ASCII plot of loss against step: `height` rows of `width` columns, the max and min
    loss labelling the top and bottom rows, the first and last step under the x axis.

    Every point is drawn (several per column when there are more points than columns), so a
    spike shows as a lone mark above the curve instead of being averaged away.
    """
    if width < 2 or height < 2:
        raise ValueError(f"loss_curve needs width and height >= 2 (got {width}, {height})")
    finite = [(int(s), float(v)) for s, v in points if math.isfinite(v)]
    if not finite:
        return "(no finite loss to plot)"

    first, last = min(s for s, _ in finite), max(s for s, _ in finite)
    low, high = min(v for _, v in finite), max(v for _, v in finite)
    grid = [[" "] * width for _ in range(height)]
    for step, loss in finite:
        col = round((step - first) / (last - first) * (width - 1)) if last > first else 0
        row = round((high - loss) / (high - low) * (height - 1)) if high > low else height // 2
        grid[row][col] = "*"

    top, bottom = f"{high:.3f}", f"{low:.3f}"
    gutter = max(len(top), len(bottom))
    lines = []
    for i, row in enumerate(grid):
        label = top if i == 0 else bottom if i == height - 1 else ""
        lines.append(f"{label:>{gutter}} |{''.join(row)}")
    lines.append(" " * gutter + " +" + "-" * width)
    first_label, last_label = str(first), str(last)
    pad = max(width - len(first_label) - len(last_label), 1)
    lines.append(" " * (gutter + 2) + first_label + " " * pad + last_label)
    return "\n".join(lines)

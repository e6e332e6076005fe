"""Trainer metrics: the FLOPs formula, MFU, the step timer, the sinks, the ASCII loss curve."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from tokenmill.train import metrics
from tokenmill.train.metrics import (
    MetricsConfig,
    MetricsLogger,
    StepTimer,
    flops_per_token,
    loss_curve,
    memory_stats,
    mfu,
    peak_flops,
)

# --- FLOPs and MFU --------------------------------------------------------------------------


def test_flops_per_token_llama2_7b_shape():
    # Llama-2-7B: 6.74e9 parameters, of which the 32000 x 4096 input embedding is 131M.
    n_params = 6_738_415_616 - 32_000 * 4096
    by_hand = 6 * n_params + 12 * 32 * 32 * 128 * 4096
    assert by_hand == 39_644_061_696 + 6_442_450_944  # 6N ~ 39.6 GFLOP, attention ~ 6.4
    assert flops_per_token(n_params, n_layers=32, n_heads=32, head_dim=128, seq_len=4096) \
        == pytest.approx(by_hand)


def test_mfu():
    # 3000 tok/s/GPU on the 7B shape above on an H100: 46.1e9 * 3000 / 989e12 ~ 14%.
    flops = flops_per_token(6_607_343_616, 32, 32, 128, 4096)
    assert mfu(3000.0, flops, 989e12) == pytest.approx(flops * 3000 / 989e12)
    assert mfu(3000.0, flops, 989e12) == pytest.approx(0.1398, abs=1e-3)
    assert mfu(3000.0, flops, None) is None


def test_peak_flops_cpu_is_none():
    assert peak_flops(torch.device("cpu")) is None
    assert mfu(1000.0, 1e9, peak_flops(torch.device("cpu"))) is None


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_peak_flops_matches_device_names(monkeypatch, name, expected):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_flops(torch.device("cuda", 0)) == expected


def test_memory_stats_on_cpu():
    stats = memory_stats(torch.device("cpu"))
    assert set(stats) == {"mem_peak_gib"}
    assert 0.01 < stats["mem_peak_gib"] < 1024  # this process has torch loaded: > 10 MiB


# --- StepTimer ------------------------------------------------------------------------------


def test_step_timer_data_wait_share():
    timer = StepTimer()
    for _ in range(4):
        with timer.waiting_for_data():
            time.sleep(0.02)
        time.sleep(0.02)  # the "compute"
        timer.step_end(tokens=1000)
    stats = timer.window()
    assert 35 < stats["data_wait_pct"] < 65  # half the time, generous for a loaded machine
    assert stats["step_time_s"] == pytest.approx(0.04, rel=0.5)
    assert stats["tokens_per_s"] == pytest.approx(4000 / (4 * 0.04), rel=0.5)

    # window() starts a new window: nothing measured yet.
    timer.data_start()
    time.sleep(0.01)
    timer.data_end()
    stats = timer.window()
    assert stats["tokens_per_s"] == 0 and stats["step_time_s"] is None
    assert stats["data_wait_pct"] > 80


# --- MetricsLogger --------------------------------------------------------------------------


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_logger_writes_stdout_jsonl_and_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path, rank=0, cfg=MetricsConfig()) as logger:
        logger.log(40, {"loss": 5.1234, "grad_norm": 0.91, "lr": 3e-4, "tokens_per_s": 12345.0,
                        "mfu": None, "data_wait_pct": 1.2, "mem_peak_gib": 1.3})
        logger.log(50, {"loss": 4.5, "grad_norm": float("nan")})
        logger.event(50, "rollback", to_step=40, reasons=["zscore 8.1 > 6.0"])

    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("step    40 | loss 5.1234 | grad_norm 0.91 | lr 3.0e-04 | tok/s 12,345 | "
                      "mfu n/a | data_wait 1.2% | mem 1.3 GiB")
    assert out[1] == "step    50 | loss 4.5000 | grad_norm n/a"
    assert out[2] == 'step    50 | ROLLBACK to_step=40 reasons=["zscore 8.1 > 6.0"]'

    lines = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["kind"]) for r in lines] == [(40, "train"), (50, "train"),
                                                       (50, "rollback")]
    assert lines[0]["loss"] == 5.1234 and lines[0]["mfu"] is None
    assert lines[1]["grad_norm"] is None  # NaN is not JSON
    assert lines[2]["reasons"] == ["zscore 8.1 > 6.0"]

    tb_dir = tmp_path / "tensorboard"
    assert any(p.name.startswith("events.out.tfevents") for p in tb_dir.iterdir())
    events = EventAccumulator(str(tb_dir))
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("train/loss")] == [
        (40, pytest.approx(5.1234)), (50, pytest.approx(4.5))]
    assert "train/mfu" not in events.Tags()["scalars"]  # None is not a point


def test_logger_appends_across_runs(tmp_path):
    cfg = MetricsConfig(tensorboard=False)
    for step in (10, 20):
        with MetricsLogger(tmp_path, rank=0, cfg=cfg) as logger:
            logger.log(step, {"loss": 1.0}, prefix="eval")
    assert [(r["step"], r["kind"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [
        (10, "eval"), (20, "eval")]


def test_only_rank_zero_writes(tmp_path, capsys):
    out_dir = tmp_path / "run"
    with MetricsLogger(out_dir, rank=1, cfg=MetricsConfig()) as logger:
        logger.log(10, {"loss": 1.0})
        logger.event(10, "checkpoint")
    assert not out_dir.exists()
    assert capsys.readouterr().out == ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_endpoint_serves_gauges(tmp_path):
    pytest.importorskip("prometheus_client")
    port = free_port()
    cfg = MetricsConfig(tensorboard=False, prometheus_port=port)
    with MetricsLogger(tmp_path, rank=0, cfg=cfg) as logger:
        logger.log(7, {"loss": 2.5, "tokens_per_s": 1234.0, "mfu": None})
        logger.event(7, "spike")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    assert "tokenmill_train_loss 2.5" in body
    assert "tokenmill_train_tokens_per_s 1234.0" in body
    assert "tokenmill_train_step 7.0" in body
    assert "tokenmill_train_mfu" not in body
    assert 'tokenmill_events_total{kind="spike"} 1.0' in body
    # close() shut the server down: nothing listens on the port any more.
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


def test_missing_optional_packages_warn_once_and_carry_on(tmp_path, monkeypatch):
    # None in sys.modules makes `import x` raise ImportError, as if x were not installed.
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setattr(metrics, "_warned", set())
    cfg = MetricsConfig(tensorboard=True, prometheus_port=free_port())
    with pytest.warns(UserWarning) as caught:
        for step in (1, 2):
            with MetricsLogger(tmp_path, rank=0, cfg=cfg) as logger:
                logger.log(step, {"loss": 1.0})
    assert sorted(str(w.message).split(" ")[0] for w in caught) == [
        "prometheus_client", "tensorboard"]  # once each, not once per logger
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 2
    assert not (tmp_path / "tensorboard").exists()


def test_train_modules_import_without_optional_packages():
    # guard.py needs no torch; neither module needs TensorBoard, Prometheus or SentencePiece.
    code = (
        "import sys\n"
        "for name in ('torch', 'tensorboard', 'prometheus_client', 'sentencepiece'):\n"
        "    sys.modules[name] = None\n"
        "import tokenmill.train.guard\n"
        "del sys.modules['torch']\n"
        "import tokenmill.train.metrics\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_refuses_impossible_values():
    with pytest.raises(ValueError, match="log_every must be >= 1"):
        MetricsConfig(log_every=0)


# --- loss_curve -----------------------------------------------------------------------------


def test_loss_curve_labels_and_rows():
    points = [(step, 2.0 + 8.0 / (1 + step / 50)) for step in range(0, 1001, 10)]
    plot = loss_curve(points, width=40, height=8)
    print(plot)
    lines = plot.splitlines()
    rows = [line for line in lines if "|" in line]
    assert len(rows) == 8
    assert rows[0].lstrip().startswith("10.000 |")  # max loss labels the top row
    assert rows[-1].lstrip().startswith(f"{min(v for _, v in points):.3f} |")
    assert all(len(row.split("|", 1)[1]) == 40 for row in rows)
    assert rows[0].split("|", 1)[1].startswith("*")  # the first point is the highest
    assert lines[-1].split() == ["0", "1000"]


def test_loss_curve_edge_cases():
    assert loss_curve([]) == "(no finite loss to plot)"
    flat = loss_curve([(0, 3.0), (5, 3.0), (9, float("nan"))], width=10, height=4)
    assert len([line for line in flat.splitlines() if "|" in line]) == 4

"""The Chinchilla planner, and the shard manifest it reads (weights, round trip, epochs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokenmill.tokenize.blending import BlendedIndex
from tokenmill.tokenize.manifest import (
    DEFAULT_WEIGHTS,
    ShardEntry,
    build_manifest,
    epochs_for_budget,
    read_manifest,
    resolve_weights,
    write_manifest,
)
from tokenmill.tokenize.planner import (
    chinchilla_tokens,
    compute_optimal,
    main,
    plan,
    training_flops,
)
from tokenmill.tokenize.shards import ShardWriter

TOKENIZER = {"path": "tokenizer/tm.model", "sha256": "ab" * 32, "vocab_size": 32_000, "eos_id": 2}

# --------------------------------------------------------------------------------- manifest


def test_default_weights_are_the_llama2_shares():
    assert DEFAULT_WEIGHTS["cc"] == 0.67
    assert sum(DEFAULT_WEIGHTS.values()) == pytest.approx(1.0)


def test_resolve_weights_drops_missing_and_renormalises():
    available = {"cc": 10**9, "github": 10**8, "wikipedia": 10**7}
    weights, warnings = resolve_weights(available, None)
    assert list(weights) == ["cc", "github", "wikipedia"]
    total = 0.67 + 0.045 + 0.045
    assert weights["cc"] == pytest.approx(0.67 / total)
    assert weights["github"] == pytest.approx(0.045 / total)
    assert sum(weights.values()) == pytest.approx(1.0)
    text = "\n".join(warnings)
    for missing in ("books", "arxiv", "stackexchange"):
        assert repr(missing) in text
    assert "'other'" in text  # the pool had nobody to feed
    assert "renormalised" in text


def test_resolve_weights_other_pool_and_unweighted_sources():
    available = {"cc": 100, "forum": 50, "news": 50}
    weights, warnings = resolve_weights(available, {"cc": 0.6, "other": 0.4})
    assert weights == pytest.approx({"cc": 0.6, "forum": 0.2, "news": 0.2})
    assert any("split evenly" in w for w in warnings)

    weights, warnings = resolve_weights({"cc": 100, "forum": 50}, {"cc": 1.0})
    assert weights == {"cc": 1.0, "forum": 0.0}
    assert any("forum" in w and "weight 0" in w for w in warnings)

    with pytest.raises(ValueError, match="no weighted source"):
        resolve_weights({"forum": 10}, {"cc": 1.0})
    with pytest.raises(ValueError, match="finite"):
        resolve_weights({"cc": 10}, {"cc": -1.0})


def make_shard_set(tmp_path):
    rng = np.random.default_rng(0)
    entries = []
    for source, n_shards in (("cc", 2), ("wikipedia", 1)):
        for k in range(n_shards):
            rel = f"{source}/{source}-{k:05d}"
            (tmp_path / source).mkdir(exist_ok=True)
            with ShardWriter(tmp_path / rel, 32_000) as w:
                for _ in range(20):
                    w.add_document(np.append(rng.integers(3, 32_000, 100), 2))
            entries.append(ShardEntry(rel, source, w.documents, w.tokens, str(w.dtype)))
    return entries


def test_manifest_round_trip_and_blend_from_it(tmp_path):
    entries = make_shard_set(tmp_path)
    manifest, warnings = build_manifest(
        entries, TOKENIZER, {"cc": 0.8, "wikipedia": 0.2}, inputs={"docs_clean": 12}, seed=9
    )
    assert warnings == []
    assert manifest.sources["cc"] == {"documents": 40, "tokens": 40 * 101, "weight": 0.8}
    path = tmp_path / "manifest.json"
    write_manifest(manifest, path)
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    again = read_manifest(path)
    assert again == manifest
    assert [s.path for s in again.shards_of("cc")] == ["cc/cc-00000", "cc/cc-00001"]
    index = BlendedIndex.from_manifest(again, seq_len=64, num_samples=100)
    assert index.seed == 9 and set(index.names) == {"cc", "wikipedia"}


def test_manifest_errors(tmp_path):
    entries = make_shard_set(tmp_path)
    manifest, _ = build_manifest(entries, TOKENIZER, {"cc": 0.8, "wikipedia": 0.2})
    path = tmp_path / "manifest.json"
    write_manifest(manifest, path)

    (tmp_path / "cc" / "cc-00001.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"cc/cc-00001\.bin"):
        read_manifest(path)
    assert read_manifest(path, check_files=False).shards[1].path == "cc/cc-00001"

    raw = json.loads(path.read_text())
    raw["version"] = 2
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="unsupported manifest version 2"):
        read_manifest(path, check_files=False)

    raw["version"] = 1
    raw["sources"]["cc"]["tokens"] += 1
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="shards sum to"):
        read_manifest(path, check_files=False)


def test_epochs_for_budget(tmp_path):
    manifest, _ = build_manifest(
        [
            ShardEntry("a/0", "cc", 10, 1_000_000, "uint16"),
            ShardEntry("b/0", "wikipedia", 10, 50_000, "uint16"),
        ],
        TOKENIZER,
        {"cc": 0.9, "wikipedia": 0.1},
    )
    epochs = epochs_for_budget(manifest, 2_000_000)
    assert epochs["cc"] == pytest.approx(2_000_000 * 0.9 / 1_000_000)  # 1.8
    assert epochs["wikipedia"] == pytest.approx(2_000_000 * 0.1 / 50_000)  # 4.0


# ---------------------------------------------------------------------------------- planner


def test_worked_example_7b():
    assert chinchilla_tokens(7e9) == pytest.approx(1.4e11)
    assert training_flops(7e9, 1.4e11) == pytest.approx(5.88e21)
    p = plan(params=7e9, gpu="H100", gpus=8, mfu=0.4)
    assert p.tokens == pytest.approx(1.4e11)
    assert p.flops == pytest.approx(5.88e21)
    seconds = 5.88e21 / (8 * 989e12 * 0.4)
    assert p.seconds == pytest.approx(seconds)
    assert p.cost == pytest.approx(seconds / 3600 * 8 * 2.5)


def test_compute_budget_uses_the_seed_formulas():
    n, d = compute_optimal(1e23)
    assert n == pytest.approx(1e23**0.5 / 8.7)
    assert d == pytest.approx(1e23**0.5 * 1.75)
    p = plan(compute=1e23, gpu="A100", gpus=64, mfu=0.5, price=1.0)
    assert (p.params, p.tokens) == (pytest.approx(n), pytest.approx(d))
    assert p.seconds == pytest.approx(6 * n * d / (64 * 312e12 * 0.5))
    assert p.cost == pytest.approx(p.seconds / 3600 * 64 * 1.0)
    with pytest.raises(ValueError, match="exactly one"):
        plan(params=1e9, compute=1e23)


def test_cli_prints_the_table_with_epochs(tmp_path, capsys):
    manifest, _ = build_manifest(
        [
            ShardEntry("a/0", "cc", 10, 200_000_000_000, "uint16"),
            ShardEntry("b/0", "wikipedia", 10, 5_000_000_000, "uint16"),
        ],
        TOKENIZER,
        {"cc": 0.9, "wikipedia": 0.1},
    )
    path = tmp_path / "manifest.json"
    write_manifest(manifest, path)
    assert main(["--params", "7e9", "--manifest", str(path)]) == 0
    out = capsys.readouterr().out
    assert "7.000e+09" in out and "1.400e+11" in out and "5.880e+21" in out
    assert "21.5 days" in out
    # 1.4e11 * 0.9 / 2e11 = 0.63 epochs of cc; 1.4e11 * 0.1 / 5e9 = 2.8 of wikipedia.
    assert "epochs cc" in out and "0.630" in out
    assert "epochs wikipedia" in out and "2.800" in out
    with pytest.raises(SystemExit):
        main(["--params", "7e9", "--compute", "1e23"])

"""The trainer under real torchrun: 2 CPU processes, gloo, FSDP2, real shards and tokenizer.

The shards are built here without Spark, with the same writer tokenize_shards uses: a
SentencePiece model trained on the sample generator's clean articles, two sources (`cc` in
three shards, `wikipedia` in two; the last of each is held out for validation).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, VENV_BIN

from tokenmill.jobs.sample_crawl import reference_corpus
from tokenmill.tokenize.manifest import ShardEntry, build_manifest, file_sha256, write_manifest
from tokenmill.tokenize.quarantine import read_entries
from tokenmill.tokenize.shards import ShardReader, ShardWriter, read_doc_ids
from tokenmill.train.model import ModelConfig, Transformer

GLOBAL_BATCH = 8  # the tiny preset's
STEPS = 40
TRAIN = str(REPO / "train" / "train.py")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import sentencepiece as spm

    lake = tmp_path_factory.mktemp("lake")
    texts = reference_corpus("en", 260, seed=7)
    tok_dir = lake / "tokenizer"
    tok_dir.mkdir()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(tok_dir / "tokenizer"),
        model_type="bpe", vocab_size=1000, byte_fallback=True, num_threads=1,
        character_coverage=1.0, pad_id=-1, unk_id=0, bos_id=1, eos_id=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tok_dir / "tokenizer.model"))
    run = "tokenize_shards-test"
    layout = {"cc": [texts[0:60], texts[60:120], texts[120:150]],
              "wikipedia": [texts[150:230], texts[230:260]]}
    entries = []
    for source, parts in layout.items():
        (lake / "shards" / run / source).mkdir(parents=True)
        for n, docs in enumerate(parts):
            rel = f"{run}/{source}/part-{n:05d}"
            with ShardWriter(lake / "shards" / rel, sp.get_piece_size()) as w:
                for k, text in enumerate(docs):
                    w.add_document([*sp.encode(text), 2], doc_id=f"{source}-{n}-{k}")
            entries.append(ShardEntry(path=rel, source=source, documents=w.documents,
                                      tokens=w.tokens, dtype="uint16"))
    m, _ = build_manifest(
        entries, tokenizer={"path": "../tokenizer/tokenizer.model",
                            "sha256": file_sha256(tok_dir / "tokenizer.model"),
                            "vocab_size": sp.get_piece_size(), "eos_id": 2},
        seed=1,
    )
    path = lake / "shards" / "manifest.json"
    write_manifest(m, path)
    return path


def torchrun(manifest: Path, out: Path, *overrides: str, nproc: int = 2,
             timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", TRAIN,
           "--manifest", str(manifest), "--config", "tiny", f"--train.out={out}",
           f"--train.quarantine={out / 'quarantine.jsonl'}", "--metrics.tensorboard=false",
           *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def steps(out: Path) -> dict[int, dict]:
    """The ledger, last record per step (a resumed or rolled-back run rewrites steps)."""
    records = {}
    for line in (out / "steps.jsonl").read_text().splitlines():
        r = json.loads(line)
        records[r["step"]] = r
    return records


def events(out: Path, kind: str) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


@pytest.fixture(scope="module")
def reference(manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 40-step run: the yardstick for every resumed one."""
    out = tmp_path_factory.mktemp("reference")
    proc = ok(torchrun(manifest, out, "--metrics.tensorboard=true"))
    assert "loss by step" in proc.stdout
    return out


# --------------------------------------------------------------------------------------------
# Model unit checks (no processes)


def test_model_is_causal_and_gqa_shapes() -> None:
    cfg = ModelConfig(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16)
    model = Transformer(cfg)
    model.init_weights(seed=3)
    assert model.layers[0].attention.wk.weight.shape == (2 * 8, 32)  # 2 kv heads of 8
    tokens = torch.randint(0, 50, (2, 12))
    logits = model(tokens)
    assert logits.shape == (2, 12, 50)
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 50
    # Positions before the change see the same prefix, so the same logits.
    assert torch.allclose(model(changed)[:, :8], logits[:, :8], atol=1e-5)
    assert not torch.allclose(model(changed)[:, 8:], logits[:, 8:])


def test_init_is_a_function_of_the_seed() -> None:
    cfg = ModelConfig(vocab_size=50, dim=32, n_layers=1, n_heads=4, max_seq_len=16)
    a, b, c = Transformer(cfg), Transformer(cfg), Transformer(cfg)
    a.init_weights(1)
    b.init_weights(1)
    c.init_weights(2)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(),
                                  strict=True):
        assert torch.equal(pa, pb), name
        if not name.endswith("norm.weight"):
            assert not torch.equal(pa, pc), name


def test_bad_config_is_a_clear_error(manifest: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, TRAIN, "--manifest", str(manifest), "--config", "tiny",
           f"--train.out={tmp_path}"]
    proc = subprocess.run([*cmd, "--model.nope=1"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 2
    assert "unknown key model.nope" in proc.stderr
    proc = subprocess.run([*cmd, "--data.seq_len=abc"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "data.seq_len: expected an integer" in proc.stderr
    proc = subprocess.run([sys.executable, TRAIN, "--manifest", str(tmp_path / "none.json")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "none.json" in proc.stderr


# --------------------------------------------------------------------------------------------
# Training runs


def test_loss_decreases_and_run_is_recorded(reference: Path, manifest: Path) -> None:
    ledger = steps(reference)
    assert sorted(ledger) == list(range(1, STEPS + 1))
    # Consecutive steps read consecutive global batches of the fixed order.
    assert [ledger[s]["first_sample"] for s in range(1, STEPS + 1)] == \
        [GLOBAL_BATCH * s for s in range(STEPS)]
    first = np.mean([ledger[s]["loss"] for s in range(1, 6)])
    last = np.mean([ledger[s]["loss"] for s in range(STEPS - 4, STEPS + 1)])
    assert first > np.log(1000) - 0.5  # starts near uniform over the vocabulary
    assert last < first - 1.0, (first, last)

    train = events(reference, "train")
    assert train and all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in train)
    assert all(0 <= r["data_wait_pct"] <= 100 for r in train)
    assert {"loss/cc", "loss/wikipedia"} <= set(train[-1])
    val = events(reference, "val")
    assert val and {"loss", "loss/cc", "loss/wikipedia"} <= set(val[-1])
    assert val[-1]["loss"] < val[0]["loss"]
    assert list((reference / "tensorboard").iterdir())

    # Checkpoints: the last `keep` (3) survive; the export loads without any process group.
    names = sorted(p.name for p in (reference / "checkpoints").iterdir())
    assert names == ["step-0000020", "step-0000030", "step-0000040"]
    export = torch.load(reference / "export" / "model.pt", weights_only=False)
    model = Transformer(ModelConfig(**export["model_config"]))
    model.load_state_dict(export["model"])
    model.init_rotary()  # derived tables are not in the state dict
    held_out = ShardReader(manifest.parent / "tokenize_shards-test/cc/part-00002")
    tokens = torch.from_numpy(held_out.read_tokens(0, 65).astype(np.int64))[None]
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1])[0], tokens[0, 1:])
    assert float(loss) < np.log(1000) - 1.0  # it learned something that carries over
    assert export["step"] == STEPS


def test_kill_and_resume_sees_the_same_batches(reference: Path, manifest: Path,
                                               tmp_path: Path) -> None:
    out = tmp_path / "run"
    killed = torchrun(manifest, out, "--debug.exit_after_step=15")
    assert killed.returncode != 0
    assert sorted(steps(out)) == list(range(1, 16))
    shutil.copytree(out, tmp_path / "run1")  # the same crash, resumed on one process below

    proc = ok(torchrun(manifest, out))
    assert "RESUMED" in proc.stdout and "step-0000010" in proc.stdout
    ref, got = steps(reference), steps(out)
    assert sorted(got) == sorted(ref)
    for s in range(11, STEPS + 1):
        assert got[s]["first_sample"] == ref[s]["first_sample"], s
        assert got[s]["batch_crc"] == ref[s]["batch_crc"], s
        assert got[s]["loss"] == pytest.approx(ref[s]["loss"], rel=1e-4), s

    # World size 2 -> 1: DCP reshards the model and optimizer; the global batch is the same
    # samples (2 accumulation steps of 4 instead of 2 ranks x 4).
    one = tmp_path / "run1"
    proc = ok(torchrun(manifest, one, nproc=1))
    assert "saved_world_size=2 world_size=1" in proc.stdout
    got = steps(one)
    for s in range(11, STEPS + 1):
        assert got[s]["batch_crc"] == ref[s]["batch_crc"], s
        assert got[s]["loss"] == pytest.approx(ref[s]["loss"], rel=1e-3), s


def test_kill_during_checkpoint_uses_the_previous_one(reference: Path, manifest: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert torchrun(manifest, out, "--debug.exit_during_save=20").returncode != 0
    ckpts = out / "checkpoints"
    assert (ckpts / "step-0000020.partial").is_dir()  # shards written, never committed
    assert not (ckpts / "step-0000020").exists()
    proc = ok(torchrun(manifest, out))
    assert "step-0000010" in proc.stdout.split("RESUMED", 1)[1].splitlines()[0]
    assert not (ckpts / "step-0000020.partial").exists()
    ref, got = steps(reference), steps(out)
    for s in range(11, STEPS + 1):
        assert got[s]["loss"] == pytest.approx(ref[s]["loss"], rel=1e-4), s


def test_spike_rolls_back_skips_and_quarantines(reference: Path, manifest: Path,
                                                tmp_path: Path) -> None:
    out = tmp_path / "run"
    bad = 15 * GLOBAL_BATCH  # the batch step 16 would read
    # The run also dies after step 17: the newest checkpoint (step 10) predates the skip,
    # and the resumed run must still skip the batch.
    died = torchrun(manifest, out, f"--debug.corrupt_samples={bad}", "--debug.exit_after_step=17")
    assert died.returncode != 0
    ok(torchrun(manifest, out))
    spikes = events(out, "loss_spike")
    assert len(spikes) == 1
    spike = spikes[0]
    assert spike["first_sample"] == bad and spike["action"] == "rollback_skip"
    assert not spike["batch_normal"]
    rolled = events(out, "rolled_back")
    assert len(rolled) == 1 and rolled[0]["skipped_batch"] == bad
    assert rolled[0]["path"].endswith("step-0000010")

    ref, got = steps(out), steps(reference)
    assert sorted(ref) == list(range(1, STEPS + 1))  # training went on to the end
    # Step 16 read the batch after the skipped one, and every later step is shifted by one.
    assert [ref[s]["first_sample"] for s in (15, 16, 17)] == [14 * 8, 16 * 8, 17 * 8]
    assert all(r["loss"] < 8 for r in ref.values())
    assert got[15]["loss"] == pytest.approx(ref[15]["loss"], rel=1e-4)  # replayed exactly

    # Quarantine: every document of the 8 samples, named by doc_id through the sidecars.
    entries = read_entries([out / "quarantine.jsonl"])
    assert {e.sample for e in entries} == set(range(bad, bad + GLOBAL_BATCH))
    assert all(e.step == 15 and e.doc_id and e.reason for e in entries)
    lake = manifest.parent
    for e in entries:
        ids = read_doc_ids(lake / e.shard)
        assert ids[e.doc_index] == e.doc_id
        assert e.doc_id.startswith(e.source)
    assert ShardReader(lake / entries[0].shard).num_tokens > 0


def test_repeated_spikes_stop_after_two_rollbacks(manifest: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # The batch at step 16 and the two that replace it are all garbage.
    bad = [15 * GLOBAL_BATCH + k * GLOBAL_BATCH for k in range(3)]
    proc = torchrun(manifest, out, f"--debug.corrupt_samples={','.join(map(str, bad))}")
    assert proc.returncode != 0
    assert "STOPPED at step 15" in proc.stderr and "2 rollback(s)" in proc.stderr
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["last_healthy_checkpoint"].endswith("step-0000010")
    assert [e["action"] for e in events(out, "loss_spike")] == \
        ["rollback_skip", "rollback_skip", "stop"]
    assert max(steps(out)) == 15  # nothing after the spikes was kept
    assert {e.sample for e in read_entries([out / "quarantine.jsonl"])} == \
        set(range(bad[0], bad[-1] + GLOBAL_BATCH))

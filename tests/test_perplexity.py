"""cc_net-style perplexity: KenLM 5-gram over SentencePiece pieces, trained on generated
English "reference" articles from the sample-crawl generator.

Needs KenLM's lmplz and build_binary in .tools/kenlm/bin (`make kenlm`). When they are missing
the tests fail rather than skip: a silently skipped quality filter is how a broken one ships.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest

from tokenmill.jobs.sample_crawl import _make_article
from tokenmill.udfs.perplexity import (
    LanguageModelFiles,
    PerplexityScorer,
    bucket,
    normalise_for_lm,
    train_language_model,
)

REPO = Path(__file__).resolve().parents[1]
KENLM_BIN = REPO / ".tools" / "kenlm" / "bin"
SEED = 1
N_REFERENCE = 300
# Small sorting memory: the test corpus is ~400k tokens, and 20% of RAM per run is wasteful.
MEMORY = "256M"


@pytest.fixture(scope="module")
def kenlm_tools() -> tuple[Path, Path]:
    lmplz, build_binary = KENLM_BIN / "lmplz", KENLM_BIN / "build_binary"
    missing = [str(p) for p in (lmplz, build_binary) if not p.is_file()]
    if missing:
        pytest.fail(
            f"KenLM tools missing: {', '.join(missing)}. Run `make kenlm` "
            "(or infra/kenlm/build.sh) to build them.",
            pytrace=False,
        )
    return lmplz, build_binary


@pytest.fixture(scope="module")
def reference() -> list[str]:
    rng = random.Random(SEED)
    return [_make_article(rng, "en").text() for _ in range(N_REFERENCE)]


@pytest.fixture(scope="module")
def model(tmp_path_factory, kenlm_tools, reference) -> LanguageModelFiles:
    lmplz, build_binary = kenlm_tools
    out = tmp_path_factory.mktemp("lm") / "en"
    return train_language_model(
        reference, out, seed=SEED, lmplz=lmplz, build_binary=build_binary, memory=MEMORY
    )


@pytest.fixture(scope="module")
def scorer(model) -> PerplexityScorer:
    return PerplexityScorer.load(model.sp_model, model.kenlm_binary)


def _held_out(lang: str) -> str:
    # A seed the reference never used: same grammar, unseen sentences.
    return _make_article(random.Random(10_000 + SEED), lang).text()


def test_model_files(model):
    assert model.sp_model.is_file() and model.kenlm_binary.is_file()
    assert model.order == 5
    # The generator's vocabulary cannot fill 8000 pieces: the cap is lowered, not an error.
    assert 0 < model.vocab_size <= 8000
    assert model.tokens > 100_000
    assert len(model.fingerprint) == 64
    assert LanguageModelFiles.read(model.sp_model.parent) == model
    # Only the model files remain: no ARPA, no staging directories beside the output.
    assert sorted(p.name for p in model.sp_model.parent.iterdir()) == [
        "lm.binary",
        "model.json",
        "sp.model",
    ]
    assert [p.name for p in model.sp_model.parent.parent.iterdir()] == ["en"]


def test_prose_beats_shuffled_spam_and_other_language(scorer):
    text = _held_out("en")
    words = text.split()
    random.Random(0).shuffle(words)
    shuffled = " ".join(words)
    spam = " ".join(["buy cheap watches best price free shipping replica rolex"] * 40)
    german = _held_out("de")

    prose, shuffled_ppl, spam_ppl, german_ppl = scorer.perplexities([text, shuffled, spam, german])
    assert prose is not None and prose < shuffled_ppl
    assert prose < spam_ppl
    assert prose < german_ppl
    # The margins are wide, not a coin flip.
    assert prose * 3 < min(shuffled_ppl, spam_ppl, german_ppl)


def test_perplexity_matches_hand_computation(model, scorer):
    import kenlm
    import sentencepiece as spm

    text = "The “old” Harbour bridge — rebuilt in 1987…\n\n  Café  visitors   waited quietly.\n"
    sp = spm.SentencePieceProcessor(model_file=str(model.sp_model))
    lm = kenlm.Model(str(model.kenlm_binary))
    log10_prob, tokens = 0.0, 0
    for line in text.splitlines():
        normalised = " ".join(normalise_for_lm(line).split())
        if not normalised:
            continue
        pieces = sp.encode(normalised, out_type=str)
        log10_prob += lm.score(" ".join(pieces), bos=True, eos=True)
        tokens += len(pieces) + 1  # </s>
    expected = 10 ** (-log10_prob / tokens)

    assert scorer.perplexity(text) == pytest.approx(expected, rel=1e-6, abs=0.005)
    assert scorer.perplexity(text) == round(expected, 2)
    assert scorer.perplexities([text]) == [scorer.perplexity(text)]


def test_training_is_deterministic(tmp_path, kenlm_tools, reference, model):
    lmplz, build_binary = kenlm_tools
    out = tmp_path / "again"
    first = train_language_model(
        reference, out, seed=SEED, lmplz=lmplz, build_binary=build_binary, memory=MEMORY
    )
    assert first.fingerprint == model.fingerprint
    assert first.sp_model.read_bytes() == model.sp_model.read_bytes()
    assert first.kenlm_binary.read_bytes() == model.kenlm_binary.read_bytes()
    # Training into an existing directory replaces it, leaving nothing else behind.
    (out / "stale.txt").write_text("from an older model")
    second = train_language_model(
        reference, out, seed=SEED, lmplz=lmplz, build_binary=build_binary, memory=MEMORY
    )
    assert second.fingerprint == model.fingerprint
    assert not (out / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["again"]


def test_empty_text_has_no_perplexity(scorer):
    assert scorer.perplexity("") is None
    assert scorer.perplexity(" \n\t\n  ") is None
    assert scorer.perplexities(["", "The old harbour.", "\n"])[0::2] == [None, None]
    assert scorer.perplexities([]) == []


def test_bucket_boundaries():
    assert bucket(10.0, 100.0, 200.0) == "head"
    assert bucket(100.0, 100.0, 200.0) == "head"
    assert bucket(100.01, 100.0, 200.0) == "middle"
    assert bucket(200.0, 100.0, 200.0) == "middle"
    assert bucket(200.01, 100.0, 200.0) == "tail"
    assert bucket(None, 100.0, 200.0) is None
    with pytest.raises(ValueError):
        bucket(1.0, 200.0, 100.0)


def test_normalise_for_lm():
    assert normalise_for_lm("Café  ÉTÉ\t1987") == "cafe ete 0000"
    assert normalise_for_lm("“Quoted” — it’s…") == '"quoted" - it\'s...'
    assert normalise_for_lm("a\n\n  \n b  c \r\n") == "a\nb c"
    assert normalise_for_lm("Ёлка, «ёж»，完了。") == 'елка, "еж",完了.'
    assert normalise_for_lm("") == ""


def test_load_is_cached_per_process(model, scorer):
    assert PerplexityScorer.load(str(model.sp_model), str(model.kenlm_binary)) is scorer
    # Pickling (a UDF closure shipped to an executor) rebuilds it through the same cache.
    assert pickle.loads(pickle.dumps(scorer)) is scorer


def test_missing_lmplz_says_how_to_build(tmp_path, kenlm_tools):
    _, build_binary = kenlm_tools
    with pytest.raises(FileNotFoundError, match="make kenlm"):
        train_language_model(
            ["some text"], tmp_path / "lm", lmplz=tmp_path / "nope", build_binary=build_binary
        )


def test_failing_lmplz_raises_with_its_stderr(tmp_path, kenlm_tools, reference):
    _, build_binary = kenlm_tools
    fake = tmp_path / "lmplz"
    fake.write_text("#!/bin/sh\necho 'lmplz: something broke' >&2\nexit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "models" / "lm"
    with pytest.raises(RuntimeError, match="something broke"):
        train_language_model(
            reference[:20], out, lmplz=fake, build_binary=build_binary, memory=MEMORY
        )
    # Nothing half-written is left behind.
    assert list(out.parent.iterdir()) == []

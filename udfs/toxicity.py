"""Toxicity signals: a word-list ratio (cheap, every document) and a fastText classifier score
(any supervised fastText model given by path, e.g. a toxic/clean or NSFW classifier)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenmill.udfs.langid import load_model, prepare_text
from tokenmill.udfs.text import read_list_file

DEFAULT_WORD_LIST = Path(__file__).parent / "lists" / "toxic_words.txt"

_LABEL_PREFIX = "__label__"
_TOKEN = re.compile(r"\w+")
# `\w` also takes digits and underscores; a token's core drops them at both ends so that
# "shit2" or "_crap_" still count, while "sh1t" stays its own (unlisted) word.
_CORE_STRIP = "0123456789_"


def _read_list(path: str | os.PathLike[str]) -> list[str]:
    return read_list_file(path, "word list")


def load_word_list(
    paths: Sequence[str | os.PathLike[str]] = (), include_default: bool = True
) -> frozenset[str]:
    """Union of the given word lists, plus the project's mild default list unless disabled.

    Entries are matched against single `\\w+` tokens, so a multi-word entry never matches.
    """
    if isinstance(paths, str | os.PathLike):
        # A lone path string would otherwise be read character by character.
        paths = (paths,)
    words: set[str] = set()
    if include_default:
        words.update(_read_list(DEFAULT_WORD_LIST))
    for path in paths:
        words.update(_read_list(path))
    return frozenset(words)


def toxic_word_ratio(text: str | None, words: frozenset[str]) -> tuple[int, float]:
    """(listed tokens, listed tokens / all tokens) with tokens = `\\w+` runs of the lowercased
    text. A token counts when it, or its core without digits/underscores at its ends, is listed.
    """
    if not text:
        return 0, 0.0
    tokens = _TOKEN.findall(text.lower())
    if not tokens:
        return 0, 0.0
    hits = 0
    for token in tokens:
        if token in words or token.strip(_CORE_STRIP) in words:
            hits += 1
    return hits, hits / len(tokens)


class FastTextClassifier:
    """Scores texts with a supervised fastText model.

    Only the path is held, so an instance pickles cheaply into Spark closures; the model itself
    is loaded on first use and shared by every instance in the process.
    """

    def __init__(self, model_path: str | os.PathLike[str], max_chars: int | None = None) -> None:
        self.model_path = os.fspath(model_path)
        # None keeps whole documents; a cap bounds the cost of pathological multi-MB pages.
        self.max_chars = max_chars

    @property
    def model(self) -> Any:
        return load_model(self.model_path)

    def labels(self) -> list[str]:
        """The model's labels, with the `__label__` prefix as fastText stores them."""
        return list(self.model.get_labels())

    def _prepare(self, text: str | None) -> str:
        if not text:
            return ""
        if self.max_chars is not None:
            return prepare_text(text, self.max_chars)
        # fastText rejects "\n" in predict input; any whitespace run is a token break anyway.
        return prepare_text(text, max(len(text), 1))

    def scores(self, texts: Sequence[str | None], label: str) -> list[float]:
        """Probability of `label` ("toxic" or "__label__toxic") for each text, in [0, 1].

        Empty texts are scored too (fastText sees only its end-of-line token), so the caller
        decides what an empty document means.
        """
        full_label = label if label.startswith(_LABEL_PREFIX) else _LABEL_PREFIX + label
        model = self.model
        known = list(model.get_labels())
        if full_label not in known:
            raise ValueError(
                f"label {label!r} is not one of the model's labels: "
                + ", ".join(sorted(lbl.removeprefix(_LABEL_PREFIX) for lbl in known))
            )
        if not texts:
            return []
        # k=-1 returns every label, so the wanted one is always present whatever its rank.
        all_labels, all_probs = model.predict([self._prepare(t) for t in texts], k=-1)
        out = []
        for labels, probs in zip(all_labels, all_probs, strict=True):
            score = 0.0
            for lbl, prob in zip(labels, probs, strict=False):
                if lbl == full_label:
                    score = min(1.0, max(0.0, float(prob)))
                    break
            out.append(score)
        return out

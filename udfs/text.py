"""Text normalisation shared by the stages (exact-dedup hash, MinHash shingles)."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_NON_WORD = re.compile(r"[^\w\s]|_", re.UNICODE)
_DIGIT = re.compile(r"\d", re.UNICODE)
_SPACE = re.compile(r"\s+", re.UNICODE)


def normalise_for_dedup(text: str) -> str:
    """FineWeb's dedup normalisation: lowercase, diacritics removed (NFKD, combining marks
    dropped), every digit → 0, punctuation → space, whitespace collapsed. Two pages that differ
    only in a date, a counter or typographic quotes normalise to the same string."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _SPACE.sub(" ", _NON_WORD.sub(" ", _DIGIT.sub("0", stripped))).strip()


def text_hash(text: str) -> str:
    """sha1 of the normalised text: the exact-duplicate key stored in `docs.text_hash`."""
    return hashlib.sha1(normalise_for_dedup(text).encode("utf-8")).hexdigest()

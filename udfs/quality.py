"""Document quality signals and the rule table that turns them into keep/drop decisions.

Families, applied in this order by `quality_signals`:

* repair: Unicode NFC, mojibake repair with ftfy, control characters and whitespace tidied
  (`normalise_text`); what ftfy still considers mis-decoded afterwards is measured, so text that
  could not be repaired can be dropped (`unrepairable_text`);
* Gopher repetition and quality statistics (Rae et al. 2021, "Scaling Language Models",
  appendix A1) on the normalised text;
* C4 line cleaning (Raffel et al. 2020), which rewrites the text, and C4's document rules;
* FineWeb's custom filters (Penedo et al. 2024) on the C4-cleaned text.

Every function takes a `str` and returns plain Python values, so a Spark Arrow UDF can loop
over a batch with them. `QUALITY_RULES` is the single source of truth for reasons, signals,
operators and default thresholds; the Spark job builds its predicate from it and
`first_failing_rule` is the same decision in Python.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import ftfy
import numpy as np
from ftfy.badness import BADNESS_RE

# --------------------------------------------------------------------------------------------
# Repair: normalise_text
# --------------------------------------------------------------------------------------------

# ftfy options: repair encodings, but change nothing a correct page could mean on purpose.
# HTML is already decoded by the extractor, so a literal "&amp;" in the text is content; ligature,
# full-width and curly-quote rewriting are NFKC-like normalisations beyond NFC that alter
# legitimate CJK and typographic text (FineWeb's terminal-punctuation rule counts ” too).
_FTFY_CONFIG = ftfy.TextFixerConfig(
    unescape_html=False,
    remove_terminal_escapes=True,
    fix_encoding=True,
    restore_byte_a0=True,
    replace_lossy_sequences=True,
    decode_inconsistent_utf8=True,
    fix_c1_controls=True,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_line_breaks=True,
    fix_surrogates=True,
    remove_control_chars=True,
    normalization="NFC",
    explain=False,
)

# C0 controls other than \t and \n (and ESC, which ftfy needs to see whole terminal escape
# sequences) are removed before ftfy, so that `ftfy_fixed` reports repairs, not this tidying.
_C0_BEFORE_FTFY = re.compile("[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]")
# Whatever control characters ftfy left (a lone ESC, a C1 it could not map) go afterwards.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters ftfy rewrites even in text that is not mojibake: ESC sequences, C1 controls,
# U+2028/U+2029 line separators, surrogates, and its own set of invisible control characters
# (U+206A-U+206F, U+FEFF, U+FFF9-U+FFFC).
_FTFY_OTHER_WORK = re.compile(
    "[\x1b\x80-\x9f\u2028\u2029\u206a-\u206f\ufeff\ufff9-\ufffc\ud800-\udfff]"
)
# ftfy.fix_text costs ~1.3 ms on 3 KB of prose, nearly all of it in scanning every line with
# its badness regex (ftfy.badness.BADNESS_RE), and the badness signal costs as much again. Two
# facts about that regex (ftfy 6.3) make most of the scan avoidable, without changing a result:
# * every alternative needs two adjacent non-ASCII characters, or one of C1 controls, Œ, œ, Â,
#   Ã; text with neither (English with curly quotes and dashes, for one) cannot match at all;
# * every alternative spans at most two ASCII characters before or after its non-ASCII ones.
#   Non-ASCII characters less than five ASCII characters apart form a cluster; clusters with up
#   to three ASCII characters of context each side (at least two where clusters are close),
#   joined by "\n\n" (which no alternative can use that far from a non-ASCII character), give
#   exactly the matches of the whole text; by the first point only clusters holding such a
#   pair or character are needed.
# (Written to start with a character set, which the regex engine scans for in a tight C loop.)
_MOJIBAKE_POSSIBLE = re.compile(
    "[^\x00-\x7f](?:(?<=[\x80-\x9f\u0152\u0153\u00c2\u00c3])|[^\x00-\x7f])"
)
_NON_ASCII_CLUSTER = re.compile(r"[^\x00-\x7f](?:[\x00-\x7f]{0,4}[^\x00-\x7f])*")
_CONTEXT = 3
# ftfy runs its badness test per line, where "^" means a line start: MULTILINE makes the gate a
# superset of every per-line test, so skipping ftfy when it does not match is safe.
_FTFY_GATE = re.compile(BADNESS_RE.pattern, BADNESS_RE.flags | re.MULTILINE)

_BLANK_LINES = re.compile(r"\n{3,}")


def _mojibake_context(text: str) -> str:
    """The parts of `text` where ftfy's badness regex can match ("" when there are none)."""
    if text.isascii() or not _MOJIBAKE_POSSIBLE.search(text):
        return ""
    pieces = []
    end = 0
    for m in _NON_ASCII_CLUSTER.finditer(text):
        if _MOJIBAKE_POSSIBLE.search(m.group()):
            start = max(end, m.start() - _CONTEXT)
            end = m.end() + _CONTEXT
            pieces.append(text[start:end])
    return "\n\n".join(pieces)


def mojibake_badness(text: str) -> int:
    """`ftfy.badness.badness(text)` (the number of likely-mojibake sequences), computed on the
    neighbourhoods of non-ASCII characters only: same count, far faster on mostly-ASCII text."""
    context = _mojibake_context(text)
    return len(BADNESS_RE.findall(context)) if context else 0


def _ftfy_may_change(text: str) -> bool:
    if text.isascii():
        return "\x1b" in text
    if _FTFY_OTHER_WORK.search(text):
        return True
    context = _mojibake_context(text)
    return bool(context and _FTFY_GATE.search(context))


def _fix_text(text: str) -> str:
    """`ftfy.fix_text(text, _FTFY_CONFIG)`, calling ftfy only for the lines that need it.

    fix_text fixes each line (with its "\\n") on its own, at ~80 µs a line of fixed overhead;
    on a page with one mis-decoded line, the gate skips the others for a few µs each."""
    segments = text.split("\n")
    last = len(segments) - 1
    out = []
    for i, segment in enumerate(segments):
        if i < last:
            segment += "\n"
        if _ftfy_may_change(segment):
            segment = ftfy.fix_text(segment, _FTFY_CONFIG)
        out.append(segment)
    return "".join(out)


def normalise_text(text: str) -> tuple[str, dict[str, Any]]:
    """NFC, mojibake repair (ftfy), control characters removed, line endings unified,
    horizontal whitespace collapsed, lines stripped, at most one blank line between paragraphs.

    Signals: `ftfy_fixed` (1 when ftfy changed the text), `mojibake_per_kchar` (ftfy's badness of
    the result per 1000 characters: what is still mis-decoded after repair) and
    `replacement_char_fraction` (U+FFFD share: bytes lost to a lossy decode, which no repair
    recovers)."""
    t = unicodedata.normalize("NFC", text)
    if "\r" in t:
        t = t.replace("\r\n", "\n").replace("\r", "\n")
    t = _C0_BEFORE_FTFY.sub("", t)
    fixed = 0
    may_change = _ftfy_may_change(t)
    if may_change:
        repaired = _fix_text(t)
        if repaired != t:
            fixed, t = 1, repaired
    # str.split() per line collapses runs of horizontal whitespace (tabs, NBSP, ideographic
    # space...) and strips the line in one C call; the only other characters it splits on (C0
    # separators, U+0085, U+2028/U+2029) are gone by now.
    t = "\n".join([" ".join(line.split()) for line in _CONTROL.sub("", t).split("\n")])
    if "\n\n\n" in t:
        t = _BLANK_LINES.sub("\n\n", t)
    t = t.strip()
    n = max(1, len(t))
    # When the gate found nothing, the badness of the text before the whitespace tidying was 0,
    # and tidying (whitespace turned into spaces, runs shortened, lines stripped) can only
    # create a match next to Â or Ã, or after ГўВЂВ (the alternatives that need a plain space);
    # without those the second scan, as costly as the gate on non-Latin text, is skipped.
    if may_change or "Ã" in t or "Â" in t or "ГўВЂВ" in t:
        bad = mojibake_badness(t)
    else:
        bad = 0
    return t, {
        "ftfy_fixed": fixed,
        "mojibake_per_kchar": bad * 1000.0 / n,
        "replacement_char_fraction": t.count("\ufffd") / n,
    }


# --------------------------------------------------------------------------------------------
# Gopher (Rae et al. 2021, appendix A1)
# --------------------------------------------------------------------------------------------

GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})


def _char_class(code_points: list[int]) -> str:
    """Body of a regex character class matching exactly `code_points` (sorted), as ranges."""
    spans: list[list[int]] = []
    for cp in code_points:
        if spans and spans[-1][1] == cp - 1:
            spans[-1][1] = cp
        else:
            spans.append([cp, cp])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in spans
    )


@lru_cache(maxsize=1)
def _token_kinds() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """One scan of the lowercased, " "-padded text finds two kinds of whole tokens: (group 1)
    tokens without an alphabetic character (digits, numbers, punctuation, symbols; those
    without a number either are the punctuation-only tokens Gopher does not count as words),
    and Gopher's English stop words with any punctuation around them ("(the", "with,").
    Starting with a whitespace class lets the engine jump from token to token. The second
    pattern finds a number in a token.

    In `re`, \\w is str.isalnum() plus "_", so it includes numbers that are neither alphabetic
    nor decimal digits (², ½, ①): they are listed explicitly, from a scan of all code points
    (~0.2 s once per process, hence built on first use). The regex engine looks up a class of
    BMP characters in a bitmap but tests a class reaching beyond the BMP range by range, so the
    few supplementary-plane numbers get their own class, guarded by a cheap range test."""
    numbers = [
        cp
        for cp in range(sys.maxunicode + 1)
        if (c := chr(cp)).isnumeric() and not c.isdecimal() and not c.isalpha()
    ]
    bmp = _char_class([cp for cp in numbers if cp <= 0xFFFF])
    astral = _char_class([cp for cp in numbers if cp > 0xFFFF])
    number = rf"\d|[{bmp}]|(?=[\U00010000-\U0010ffff])[{astral}]"
    stop = "|".join(sorted(GOPHER_STOP_WORDS))
    # Most tokens start with a letter that can begin neither kind: rejected in one test.
    never_first = "".join(sorted(set(string.ascii_lowercase) - {w[0] for w in GOPHER_STOP_WORDS}))
    kinds = re.compile(
        rf"\s(?![{never_first}])(?:((?:[^\w\s]|_|{number})+)|[^\w\s]*(?:{stop})[^\w\s]*)(?=\s)"
    )
    return kinds, re.compile(number)


_BULLETS = ("•", "●", "○", "▪", "◦", "‣", "⁃", "-", "*", "·", "–")
_ELLIPSES = ("...", "…")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_TOP_NGRAM_SIZES = (2, 3, 4)
_DUP_NGRAM_SIZES = (5, 6, 7, 8, 9, 10)


def _lines(text: str) -> list[str]:
    return [s for s in map(str.strip, text.split("\n")) if s]


def _paragraphs(text: str) -> list[str]:
    return [s for s in map(str.strip, _PARAGRAPH_BREAK.split(text)) if s]


def _quality_signals(text: str, tokens: list[str], lines: list[str]) -> dict[str, Any]:
    kinds, number = _token_kinds()
    found = kinds.findall(f" {text.lower()} ")
    non_alpha = [token for token in found if token]
    symbols = [token for token in non_alpha if not number.search(token)]
    n_tokens = len(tokens)
    n_words = n_tokens - len(symbols)
    word_chars = sum(map(len, tokens)) - sum(map(len, symbols))
    n_lines = len(lines)
    ellipses = text.count("...") + text.count("…")
    return {
        "words": n_words,
        "mean_word_length": word_chars / n_words if n_words else 0.0,
        "hash_ratio": text.count("#") / n_words if n_words else 0.0,
        "ellipsis_ratio": ellipses / n_words if n_words else 0.0,
        "bullet_lines_ratio": (
            sum(1 for s in lines if s.startswith(_BULLETS)) / n_lines if n_lines else 0.0
        ),
        "ellipsis_lines_ratio": (
            sum(1 for s in lines if s.endswith(_ELLIPSES)) / n_lines if n_lines else 0.0
        ),
        "alpha_words_ratio": (n_tokens - len(non_alpha)) / n_tokens if n_tokens else 0.0,
        "stop_words": len(found) - len(non_alpha),
    }


def gopher_quality_signals(text: str) -> dict[str, Any]:
    """Gopher's quality-filter statistics (word count, mean word length, symbol ratios, bullet
    and ellipsis lines, alphabetic words, stop words)."""
    return _quality_signals(text, text.split(), _lines(text))


def _duplicate_fractions(items: list[str]) -> tuple[float, float]:
    """(share of items repeating an earlier item, share of characters in those repeats)."""
    if not items:
        return 0.0, 0.0
    seen: set[str] = set()
    dup_items = dup_chars = 0
    for item in items:
        if item in seen:
            dup_items += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    total_chars = sum(map(len, items))
    return dup_items / len(items), (dup_chars / total_chars if total_chars else 0.0)


def _ngram_repetition(words: list[str], lengths: list[int]) -> dict[int, int]:
    """Characters per n-gram size: for n = 2..4 the most frequent n-gram's characters times its
    count (ties go to the longest n-gram, so the value does not depend on word order); for
    n = 5..10 the characters of the words covered by any n-gram occurring more than once, each
    word counted once. 0 when no n-gram of that size repeats."""
    chars = dict.fromkeys(_TOP_NGRAM_SIZES + _DUP_NGRAM_SIZES, 0)
    n_words = len(words)
    if n_words < 2:
        return chars
    # Words become ints (the position of a word's first occurrence) and every n-gram one int
    # below n_words²: (number of its (n-1)-word prefix) * n_words + (its last word). numpy then
    # counts them by sorting, at the same cost for n = 10 as for n = 2; 3-4x faster than
    # Counters of tuples on long or repetitive pages, as fast on a short ordinary one.
    word_ids = np.fromiter(map({}.setdefault, words, range(n_words)), np.int64, n_words)
    cum = np.zeros(n_words + 1, np.int64)  # characters of words[i:j] = cum[j] - cum[i]
    np.cumsum(lengths, out=cum[1:])
    starts = np.arange(n_words - 1)
    keys = word_ids[:-1] * n_words + word_ids[1:]
    n = 2
    while keys.size > 1:
        # np.unique by hand, with fewer passes: at a few hundred n-grams its fixed overhead is
        # most of the cost. The stable sort puts each n-gram's first occurrence at the head of
        # its run.
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        head = np.empty(keys.size, bool)
        head[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=head[1:])
        if head.all():
            break
        heads = np.flatnonzero(head)
        counts = np.diff(heads, append=keys.size)
        first = order[heads]
        number = np.empty(keys.size, np.int64)
        number[order] = np.cumsum(head) - 1
        best = int(counts.max())
        repeated = counts[number] > 1
        rep_starts = starts[repeated]
        if n in _TOP_NGRAM_SIZES:
            tied = starts[first[counts == best]]
            chars[n] = best * int((cum[tied + n] - cum[tied]).max())
        else:
            # The covered words are the union of [s, s + n) over the sorted starts s; cut each
            # at the next start, the pieces are disjoint: sum their characters.
            ends = np.minimum(rep_starts + n, np.append(rep_starts[1:], n_words))
            chars[n] = int((cum[ends] - cum[rep_starts]).sum())
        if n == _DUP_NGRAM_SIZES[-1]:
            break
        # Every occurrence of a repeated (n+1)-gram starts where a repeated n-gram does, so
        # only those positions are extended: one sort over the whole document (bigrams), then
        # ever smaller ones.
        extendable = rep_starts + n < n_words
        starts = rep_starts[extendable]
        keys = number[repeated][extendable] * n_words + word_ids[starts + n]
        n += 1
    return chars


def _repetition_signals(text: str, words: list[str], lines: list[str]) -> dict[str, Any]:
    dup_line, dup_line_chars = _duplicate_fractions(lines)
    dup_para, dup_para_chars = _duplicate_fractions(_paragraphs(text))
    signals: dict[str, Any] = {
        "dup_line_fraction": dup_line,
        "dup_para_fraction": dup_para,
        "dup_line_char_fraction": dup_line_chars,
        "dup_para_char_fraction": dup_para_chars,
    }
    lengths = list(map(len, words))
    total = sum(lengths)
    ngram_chars = _ngram_repetition(words, lengths)
    for n in _TOP_NGRAM_SIZES:
        signals[f"top_{n}gram_char_fraction"] = ngram_chars[n] / total if total else 0.0
    for n in _DUP_NGRAM_SIZES:
        signals[f"dup_{n}gram_char_fraction"] = ngram_chars[n] / total if total else 0.0
    return signals


def gopher_repetition_signals(text: str) -> dict[str, Any]:
    """Gopher's repetition statistics: duplicate lines and paragraphs (by count and by
    characters), the most frequent 2-4-gram's character share, and the share of characters in
    duplicated 5-10-grams."""
    return _repetition_signals(text, text.split(), _lines(text))


# --------------------------------------------------------------------------------------------
# C4 (Raffel et al. 2020): line cleaning, then document rules
# --------------------------------------------------------------------------------------------

# Defaults. `filter_no_terminal_punct` is False as in FineWeb, which replaces C4's per-line rule
# by its own terminal-punctuation ratio (fineweb_signals); C4's original setting is True.
# A plain dict (so it pickles into Spark closures); treat it as read-only.
C4_DEFAULTS: dict[str, Any] = {
    "filter_no_terminal_punct": False,
    "min_words_per_line": 3,
    "max_word_length": 1000,
    "remove_citations": True,
}

# Wikipedia-style citation markers, with the space before them so "strong [1]." → "strong.".
_CITATION = re.compile(r"[^\S\n]*\[(?:\d+|edit|citation needed)\]", re.IGNORECASE)
# C4 drops lines mentioning javascript (script warnings) and policy/cookie boilerplate.
_C4_BAD_LINE = re.compile(
    "javascript|terms of use|privacy policy|cookie policy|uses cookies|use of cookies|use cookies"
)
# Substrings of every phrase above: most pages contain none, and four `in` tests on the whole
# page are much cheaper than the alternation on every line.
_C4_BAD_KEYS = ("javascript", "terms of use", "policy", "cookies")
_C4_END_MARKS = (".", "!", "?", '"')
# A sentence ends at . ! ? (closing quotes/brackets may follow) before whitespace or the end;
# a stand-in for C4's NLTK sentence splitter that needs no model.
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|\Z)")
_HAS_WORD_CHAR = re.compile(r"[^\W_]")


def count_sentences(text: str) -> int:
    """Sentences in `text`: segments between sentence ends holding a letter or digit (a
    trailing fragment without end mark counts too)."""
    return sum(map(bool, map(_HAS_WORD_CHAR.search, _SENTENCE_END.split(text))))


def c4_clean(text: str, params: Mapping[str, Any] = C4_DEFAULTS) -> tuple[str, dict[str, Any]]:
    """C4's line filter (citations removed; lines with too few words, an over-long word,
    "javascript" or policy/cookie boilerplate dropped; optionally lines without terminal
    punctuation), then C4's document signals on the result. Blank lines are kept as paragraph
    separators, at most one in a row, none at either end. `params` may give only some keys."""
    cleaned, signals, _, _ = _c4_clean(text, params)
    return cleaned, signals


def _c4_clean(text: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[str], int]:
    """c4_clean, also returning the kept lines and their word count for fineweb_signals."""
    p = params if params is C4_DEFAULTS else {**C4_DEFAULTS, **params}
    no_terminal_punct = bool(p["filter_no_terminal_punct"])
    min_words = int(p["min_words_per_line"])
    max_word_length = int(p["max_word_length"])
    remove_citations = bool(p["remove_citations"])
    lowered = text.lower()
    # A removed citation could join a phrase ("java[1]script"), hence the "[" test.
    check_phrases = "[" in text or any(key in lowered for key in _C4_BAD_KEYS)

    out: list[str] = []
    kept_lines: list[str] = []
    blank_pending = False
    removed = kept_words = 0
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            blank_pending = bool(out)
            continue
        if remove_citations and "[" in line:
            line = _CITATION.sub("", line).strip()
        words = line.split()
        if (
            not words
            or len(words) < min_words
            or max(map(len, words)) > max_word_length
            or (check_phrases and _C4_BAD_LINE.search(line.lower()))
            or (no_terminal_punct and not line.endswith(_C4_END_MARKS))
        ):
            removed += 1
            continue
        if blank_pending:
            out.append("")
            blank_pending = False
        out.append(line)
        kept_lines.append(line)
        kept_words += len(words)
    cleaned = "\n".join(out)
    signals = {
        "c4_lines_removed": removed,
        "c4_chars_removed": len(text) - len(cleaned),
        "c4_lines_kept": len(kept_lines),
        "c4_sentences": count_sentences(cleaned),
        "c4_lorem_ipsum": int("lorem ipsum" in lowered),
        "c4_curly_bracket": int("{" in cleaned),
    }
    return cleaned, signals, kept_lines, kept_words


# --------------------------------------------------------------------------------------------
# FineWeb (Penedo et al. 2024) custom filters
# --------------------------------------------------------------------------------------------

_FINEWEB_END_MARKS = (".", "!", "?", '"', "”", "…")
_FINEWEB_SHORT_LINE = 30


def fineweb_signals(text: str) -> dict[str, Any]:
    """FineWeb's filters, meant for C4-cleaned text: share of lines ending in terminal
    punctuation, of short lines (≤ 30 characters), of characters in duplicated lines, and
    newlines per word (list-like pages)."""
    return _fineweb_signals(text, _lines(text), len(text.split()))


def _fineweb_signals(text: str, lines: list[str], n_words: int) -> dict[str, Any]:
    n_lines = len(lines)
    _, dup_chars = _duplicate_fractions(lines)
    return {
        "line_punct_ratio": (
            sum(1 for s in lines if s.endswith(_FINEWEB_END_MARKS)) / n_lines if n_lines else 0.0
        ),
        "short_line_ratio": (
            sum(1 for s in lines if len(s) <= _FINEWEB_SHORT_LINE) / n_lines if n_lines else 0.0
        ),
        "char_dup_ratio": dup_chars,
        "newline_ratio": text.count("\n") / n_words if n_words else 0.0,
    }


# --------------------------------------------------------------------------------------------
# All together
# --------------------------------------------------------------------------------------------

# Every key `quality_signals` returns, with its Python type (the UDF's output schema).
SIGNAL_TYPES: dict[str, type] = {
    "ftfy_fixed": int,
    "mojibake_per_kchar": float,
    "replacement_char_fraction": float,
    "dup_line_fraction": float,
    "dup_para_fraction": float,
    "dup_line_char_fraction": float,
    "dup_para_char_fraction": float,
    **{f"top_{n}gram_char_fraction": float for n in (2, 3, 4)},
    **{f"dup_{n}gram_char_fraction": float for n in range(5, 11)},
    "words": int,
    "mean_word_length": float,
    "hash_ratio": float,
    "ellipsis_ratio": float,
    "bullet_lines_ratio": float,
    "ellipsis_lines_ratio": float,
    "alpha_words_ratio": float,
    "stop_words": int,
    "c4_lines_removed": int,
    "c4_chars_removed": int,
    "c4_lines_kept": int,
    "c4_sentences": int,
    "c4_lorem_ipsum": int,
    "c4_curly_bracket": int,
    "line_punct_ratio": float,
    "short_line_ratio": float,
    "char_dup_ratio": float,
    "newline_ratio": float,
}


def quality_signals(
    text: str, c4_params: Mapping[str, Any] = C4_DEFAULTS
) -> tuple[str, dict[str, Any]]:
    """normalise_text → Gopher repetition and quality (normalised text) → c4_clean →
    fineweb_signals (cleaned text). Returns the cleaned text and every signal in one flat dict
    (keys as in `SIGNAL_TYPES`)."""
    normalised, signals = normalise_text(text)
    tokens, lines = normalised.split(), _lines(normalised)
    signals.update(_repetition_signals(normalised, tokens, lines))
    signals.update(_quality_signals(normalised, tokens, lines))
    cleaned, c4, kept_lines, kept_words = _c4_clean(normalised, c4_params)
    signals.update(c4)
    signals.update(_fineweb_signals(cleaned, kept_lines, kept_words))
    return cleaned, signals


# --------------------------------------------------------------------------------------------
# Rule table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    reason: str  # the exact string written to the rejections table
    signal: str  # key in the signals dict
    op: str  # "lt": drop if signal < threshold; "gt": drop if signal > threshold;
    # "flag": drop if the signal is truthy and the threshold (a bool) is True
    param: str  # name of the threshold (a config field name)
    default: float | int | bool
    source: str  # short citation


_GOPHER = "Gopher (Rae et al. 2021, A1)"
_C4 = "C4 (Raffel et al. 2020)"
_FINEWEB = "FineWeb (Penedo et al. 2024)"
_REPAIR = "ftfy badness after repair (tokenmill)"

_TOP_NGRAM_MAX = {2: 0.20, 3: 0.18, 4: 0.16}
_DUP_NGRAM_MAX = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}

QUALITY_RULES: tuple[Rule, ...] = (
    # Measured with ftfy 6.3.1: clean text in a dozen scripts scores 0 after repair, as do all
    # 150 real pages of the sample WARCs (8 of them repaired); text ftfy cannot repair (a wrong
    # single-byte code page, UTF-8 with its C1 bytes stripped, a lossy decode) scores 5-400.
    # 2 per 1000 characters still lets a stray artefact or two through on a normal page.
    Rule("unrepairable_text", "mojibake_per_kchar", "gt", "max_mojibake_per_kchar", 2.0, _REPAIR),
    # A lossy decode turns every non-ASCII letter into U+FFFD: 2-8 % of European text, most of
    # Cyrillic or CJK text. One per 100 characters is far above a stray bad byte on a page.
    Rule(
        "unrepairable_text",
        "replacement_char_fraction",
        "gt",
        "max_replacement_char_fraction",
        0.01,
        "U+FFFD share (tokenmill)",
    ),
    Rule(
        "gopher_dup_line_fraction",
        "dup_line_fraction",
        "gt",
        "gopher_max_dup_line_fraction",
        0.30,
        _GOPHER,
    ),
    Rule(
        "gopher_dup_para_fraction",
        "dup_para_fraction",
        "gt",
        "gopher_max_dup_para_fraction",
        0.30,
        _GOPHER,
    ),
    Rule(
        "gopher_dup_line_chars",
        "dup_line_char_fraction",
        "gt",
        "gopher_max_dup_line_char_fraction",
        0.20,
        _GOPHER,
    ),
    Rule(
        "gopher_dup_para_chars",
        "dup_para_char_fraction",
        "gt",
        "gopher_max_dup_para_char_fraction",
        0.20,
        _GOPHER,
    ),
    *(
        Rule(
            f"gopher_top_{n}gram",
            f"top_{n}gram_char_fraction",
            "gt",
            f"gopher_max_top_{n}gram_char_fraction",
            limit,
            _GOPHER,
        )
        for n, limit in _TOP_NGRAM_MAX.items()
    ),
    *(
        Rule(
            f"gopher_dup_{n}gram",
            f"dup_{n}gram_char_fraction",
            "gt",
            f"gopher_max_dup_{n}gram_char_fraction",
            limit,
            _GOPHER,
        )
        for n, limit in _DUP_NGRAM_MAX.items()
    ),
    Rule("gopher_min_words", "words", "lt", "gopher_min_words", 50, _GOPHER),
    Rule("gopher_max_words", "words", "gt", "gopher_max_words", 100_000, _GOPHER),
    Rule(
        "gopher_min_mean_word_length",
        "mean_word_length",
        "lt",
        "gopher_min_mean_word_length",
        3.0,
        _GOPHER,
    ),
    Rule(
        "gopher_max_mean_word_length",
        "mean_word_length",
        "gt",
        "gopher_max_mean_word_length",
        10.0,
        _GOPHER,
    ),
    Rule("gopher_hash_ratio", "hash_ratio", "gt", "gopher_max_hash_ratio", 0.1, _GOPHER),
    Rule(
        "gopher_ellipsis_ratio", "ellipsis_ratio", "gt", "gopher_max_ellipsis_ratio", 0.1, _GOPHER
    ),
    Rule(
        "gopher_bullet_lines",
        "bullet_lines_ratio",
        "gt",
        "gopher_max_bullet_lines_ratio",
        0.9,
        _GOPHER,
    ),
    Rule(
        "gopher_ellipsis_lines",
        "ellipsis_lines_ratio",
        "gt",
        "gopher_max_ellipsis_lines_ratio",
        0.3,
        _GOPHER,
    ),
    Rule(
        "gopher_alpha_words",
        "alpha_words_ratio",
        "lt",
        "gopher_min_alpha_words_ratio",
        0.8,
        _GOPHER,
    ),
    Rule("gopher_stop_words", "stop_words", "lt", "gopher_min_stop_words", 2, _GOPHER),
    Rule("c4_empty", "c4_lines_kept", "lt", "c4_min_lines", 1, _C4),
    Rule("c4_lorem_ipsum", "c4_lorem_ipsum", "flag", "c4_drop_lorem_ipsum", True, _C4),
    Rule("c4_curly_bracket", "c4_curly_bracket", "flag", "c4_drop_curly_bracket", True, _C4),
    Rule("c4_min_sentences", "c4_sentences", "lt", "c4_min_sentences", 5, _C4),
    Rule(
        "fineweb_line_punct",
        "line_punct_ratio",
        "lt",
        "fineweb_min_line_punct_ratio",
        0.12,
        _FINEWEB,
    ),
    Rule(
        "fineweb_short_lines",
        "short_line_ratio",
        "gt",
        "fineweb_max_short_line_ratio",
        0.67,
        _FINEWEB,
    ),
    Rule("fineweb_char_dup", "char_dup_ratio", "gt", "fineweb_max_char_dup_ratio", 0.01, _FINEWEB),
    Rule("fineweb_list_ratio", "newline_ratio", "gt", "fineweb_max_newline_ratio", 0.3, _FINEWEB),
)


def thresholds_default() -> dict[str, Any]:
    """{rule.param: rule.default} for every rule."""
    return {rule.param: rule.default for rule in QUALITY_RULES}


def first_failing_rule(
    signals: Mapping[str, Any],
    thresholds: Mapping[str, Any],
    rules: tuple[Rule, ...] = QUALITY_RULES,
) -> str | None:
    """The reason of the first rule (in table order) the signals fail, else None. A threshold
    set to None disables its rule; a param missing from `thresholds` uses the rule's default."""
    for rule in rules:
        threshold = thresholds.get(rule.param, rule.default)
        if threshold is None:
            continue
        value = signals[rule.signal]
        if rule.op == "lt":
            failed = value < threshold
        elif rule.op == "gt":
            failed = value > threshold
        elif rule.op == "flag":
            failed = bool(threshold) and bool(value)
        else:
            raise ValueError(f"rule {rule.reason}: unknown op {rule.op!r}")
        if failed:
            return rule.reason
    return None

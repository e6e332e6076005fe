"""Perplexity of a document under a per-language reference language model (cc_net's method).

cc_net (Wenzek et al. 2020) ranks web text by how much it looks like Wikipedia: a 5-gram KenLM
model is trained on SentencePiece-tokenised, normalised reference text of one language, and
every document of that language is scored with it. Low perplexity means "reads like the
reference", high perplexity means boilerplate, keyword lists, machine-generated junk or another
language. Documents are split into head / middle / tail at the 30th / 60th percentiles.

The scoring is, for a document with lines (paragraphs) l_1..l_n, each normalised and encoded
to pieces w_1..w_k:

    perplexity = 10 ** (-(sum_i log10 P(l_i)) / sum_i (k_i + 1))

where log10 P(l_i) is KenLM's score of the sentence with <s> and </s> (so it includes the
probability of </s>, hence the + 1 per line). Lines without pieces are skipped.

Training needs KenLM's `lmplz` and `build_binary` executables (`infra/kenlm/build.sh`); scoring
only needs the `kenlm` and `sentencepiece` Python modules. Nothing here downloads anything.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

SP_MODEL_FILE = "sp.model"
KENLM_BINARY_FILE = "lm.binary"
MANIFEST_FILE = "model.json"

BUILD_HINT = "build it with `make kenlm` (runs infra/kenlm/build.sh, output in .tools/kenlm/bin)"

# --- normalisation --------------------------------------------------------------------------

# Typographic variants that mean the same thing to a language model. Without this, a page that
# uses curly quotes or en dashes gets pieces (and n-grams) the reference never saw, and its
# perplexity says more about the site's typography than about its text.
_PUNCT = {
    **dict.fromkeys("‘’‚‛′´`", "'"),
    **dict.fromkeys("“”„‟″«»「」『』《》〈〉", '"'),
    **dict.fromkeys("‐‑‒–—―−﹘﹣－", "-"),
    "…": "...",
    # Full-width CJK punctuation: NFD (unlike NFKC) leaves these alone.
    "，": ",",
    "、": ",",
    "。": ".",
    "．": ".",
    "！": "!",
    "？": "?",
    "：": ":",
    "∶": ":",
    "；": ";",
    "（": "(",
    "）": ")",
    "［": "[",
    "］": "]",
    # Invisible characters that split words for the tokenizer but not for a reader.
    **dict.fromkeys("\u00ad\u200b\u200c\u200d\u2060\ufeff", ""),
}
_DIGIT = re.compile(r"\d")


@lru_cache(maxsize=1)
def _lm_translation() -> dict[int, str | None]:
    """One str.translate table for the punctuation map and for deleting combining marks: a
    single C-level pass per text instead of a Python loop per character. Built once per
    process (scanning all code points takes ~0.3 s)."""
    table: dict[int, str | None] = {
        cp: None for cp in range(sys.maxunicode + 1) if unicodedata.combining(chr(cp))
    }
    table.update({ord(k): v for k, v in _PUNCT.items()})
    return table


def normalise_for_lm(text: str) -> str:
    """cc_net-style normalisation applied before SentencePiece: lowercase, accents removed (NFD,
    combining marks dropped), every digit → 0, typographic quotes/dashes/ellipsis and full-width
    punctuation mapped to ASCII, whitespace collapsed within each line. Line breaks are kept
    (a line is the unit that gets <s> ... </s>); empty lines are dropped."""
    # Whole-text passes, then one split per line: ~40% faster than normalising line by line.
    lowered = text.lower()
    if not lowered.isascii():
        # NFD splits "é" into "e" + U+0301 so the accent can be dropped; the model then shares
        # statistics between accented and unaccented spellings, as cc_net's does.
        lowered = unicodedata.normalize("NFD", lowered).translate(_lm_translation())
    # Digits → 0: numbers carry no language signal and would otherwise blow up the vocabulary.
    lowered = _DIGIT.sub("0", lowered)
    words_per_line = (line.split() for line in lowered.splitlines())
    return "\n".join(" ".join(words) for words in words_per_line if words)


# --- model files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LanguageModelFiles:
    """A trained model: the SentencePiece model and the KenLM binary that go together, with
    what they were trained with. `fingerprint` identifies the pair (sha256 over both files), so
    a score stored in the lake can name the exact model that produced it. `vocab_size` is the
    SentencePiece vocabulary actually trained (capped on small corpora); `tokens` the number of
    pieces in the training text, not counting </s>."""

    sp_model: Path
    kenlm_binary: Path
    order: int
    vocab_size: int
    fingerprint: str
    tokens: int

    @classmethod
    def read(cls, model_dir: str | Path) -> LanguageModelFiles:
        """The model that `train_language_model` wrote to `model_dir` (from its manifest)."""
        model_dir = Path(model_dir)
        meta = json.loads((model_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        return cls(
            sp_model=model_dir / SP_MODEL_FILE,
            kenlm_binary=model_dir / KENLM_BINARY_FILE,
            order=int(meta["order"]),
            vocab_size=int(meta["vocab_size"]),
            fingerprint=str(meta["fingerprint"]),
            tokens=int(meta["tokens"]),
        )


def model_fingerprint(sp_model: str | Path, kenlm_binary: str | Path) -> str:
    """sha256 over both files, each preceded by its length so that bytes cannot move from one
    file to the other without changing the fingerprint. Streams: KenLM binaries reach GBs."""
    digest = hashlib.sha256()
    for path in (Path(sp_model), Path(kenlm_binary)):
        digest.update(path.stat().st_size.to_bytes(8, "big"))
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


# --- training -------------------------------------------------------------------------------

# SentencePiece reports the largest vocabulary a corpus supports in this message; the reference
# corpus of a small language (or a test) can be smaller than the requested vocabulary.
_VOCAB_TOO_HIGH = re.compile(
    r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)"
)
# Sentences (paragraphs) SentencePiece samples for training; beyond this, more text changes the
# pieces very little and costs memory. The sample is drawn with the seeded generator.
_SP_MAX_SENTENCES = 2_000_000
# SentencePiece silently skips longer sentences (default 4192 bytes); paragraphs can be longer.
_SP_MAX_SENTENCE_BYTES = 1 << 15
_STDERR_TAIL_CHARS = 2000


def _resolve_tool(path: str | Path, name: str) -> Path:
    tool = Path(path)
    if not tool.is_file():
        raise FileNotFoundError(f"KenLM `{name}` not found at {tool}; {BUILD_HINT}")
    if not os.access(tool, os.X_OK):
        raise FileNotFoundError(f"KenLM `{name}` at {tool} is not executable; {BUILD_HINT}")
    return tool


def _run_tool(args: list[str], *, stdin: Any = None, stdout: Any = None) -> None:
    """Run a KenLM tool; a failure raises RuntimeError carrying the end of its stderr (where
    lmplz and build_binary say what went wrong, after their progress output)."""
    try:
        result = subprocess.run(
            args, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, check=False
        )
    except OSError as exc:  # e.g. exec format error, a binary for another machine
        raise RuntimeError(f"could not run {args[0]}: {exc}; {BUILD_HINT}") from exc
    if result.returncode != 0:
        tail = result.stderr.decode("utf-8", "replace")[-_STDERR_TAIL_CHARS:]
        raise RuntimeError(
            f"{Path(args[0]).name} failed with exit code {result.returncode}: "
            f"{' '.join(args)}\n{tail}"
        )


def _train_sentencepiece(lines_file: Path, vocab_size: int, seed: int) -> bytes:
    """Train the unigram model (as cc_net) and return the serialised model. Sentences come from
    an iterator and the model comes back as bytes, so no file path ends up inside the model's
    trainer spec: the same text and seed give the same bytes wherever it is trained."""
    import sentencepiece as spm

    def train(size: int, hard_limit: bool = True) -> bytes:
        # The seed is process-global in SentencePiece; set it right before each training so
        # the sampling and shuffling of input sentences is reproducible.
        spm.set_random_generator_seed(seed)
        out = io.BytesIO()
        with lines_file.open(encoding="utf-8", newline="\n") as f:
            spm.SentencePieceTrainer.train(
                sentence_iterator=(line.rstrip("\n") for line in f),
                model_writer=out,
                model_type="unigram",
                vocab_size=size,
                input_sentence_size=_SP_MAX_SENTENCES,
                shuffle_input_sentence=True,
                max_sentence_length=_SP_MAX_SENTENCE_BYTES,
                # One thread: the E-step sums partial counts per thread, so the floating-point
                # results (and the chosen pieces) depend on the thread count; one thread makes
                # the bytes reproducible on any machine.
                num_threads=1,
                hard_vocab_limit=hard_limit,
                minloglevel=2,
            )
        return out.getvalue()

    try:
        return train(vocab_size)
    except RuntimeError as exc:
        if "Vocabulary size too high" not in str(exc):
            raise
        # A small corpus cannot fill the vocabulary: take the largest it supports, exactly, so
        # vocab_size stays a precise number; should the message change wording, let
        # SentencePiece treat the size as an upper bound instead.
        match = _VOCAB_TOO_HIGH.search(str(exc))
        if match is None:
            return train(vocab_size, hard_limit=False)
        return train(int(match.group(1)))


def _encode_file(sp: Any, lines_file: Path, pieces_file: Path) -> int:
    """Write the pieces of each line, space-separated (lmplz's input format); returns the
    number of pieces."""
    tokens = 0
    batch: list[str] = []

    def flush(out: io.TextIOBase) -> int:
        count = 0
        for pieces in sp.encode(batch, out_type=str):
            if pieces:
                out.write(" ".join(pieces) + "\n")
                count += len(pieces)
        batch.clear()
        return count

    with (
        lines_file.open(encoding="utf-8", newline="\n") as f,
        pieces_file.open("w", encoding="utf-8") as out,
    ):
        for line in f:
            batch.append(line.rstrip("\n"))
            if len(batch) >= 10_000:
                tokens += flush(out)
        tokens += flush(out)
    return tokens


def _replace_dir(staging: Path, out_dir: Path) -> None:
    """Move the finished model into place. A rename is atomic; replacing an existing model is
    two renames (old out of the way, new in), so readers see the old or the new model, never a
    half-written one."""
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        old.rmdir()
        out_dir.rename(old)
    staging.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def train_language_model(
    texts: Iterable[str],
    out_dir: str | Path,
    *,
    order: int = 5,
    vocab_size: int = 8000,
    seed: int = 1,
    lmplz: str | Path,
    build_binary: str | Path,
    memory: str = "20%",
) -> LanguageModelFiles:
    """Train a SentencePiece model and an `order`-gram KenLM model on reference texts (e.g.
    Wikipedia articles of one language) and write them to `out_dir` (replacing it).

    Each text is normalised with `normalise_for_lm`; each non-empty line is one training
    sentence. `memory` is lmplz's and build_binary's sorting memory (GNU sort syntax: "20%",
    "2G"). The same texts and seed give byte-identical files (and fingerprint).
    """
    if order < 2:
        raise ValueError(f"order must be >= 2, got {order}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    # Fail before spending time on SentencePiece when the tools are missing.
    lmplz_path = _resolve_tool(lmplz, "lmplz")
    build_binary_path = _resolve_tool(build_binary, "build_binary")

    import sentencepiece as spm

    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Staging next to out_dir: same filesystem, so the final rename is atomic, and the ARPA
    # file (the largest intermediate) lands where there is room for the model anyway.
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        scratch = staging / "scratch"
        scratch.mkdir()
        lines_file = scratch / "reference.txt"
        with lines_file.open("w", encoding="utf-8") as f:
            n_lines = 0
            for text in texts:
                normalised = normalise_for_lm(text) if text else ""
                if normalised:
                    f.write(normalised + "\n")
                    n_lines += normalised.count("\n") + 1
        if n_lines == 0:
            raise ValueError("no reference text: every text was empty after normalisation")

        sp_bytes = _train_sentencepiece(lines_file, vocab_size, seed)
        sp_model = staging / SP_MODEL_FILE
        sp_model.write_bytes(sp_bytes)
        sp = spm.SentencePieceProcessor(model_proto=sp_bytes)

        pieces_file = scratch / "pieces.txt"
        tokens = _encode_file(sp, lines_file, pieces_file)
        lines_file.unlink()

        arpa = scratch / "lm.arpa"
        with pieces_file.open("rb") as stdin, arpa.open("wb") as stdout:
            _run_tool(
                [
                    str(lmplz_path),
                    "-o", str(order),
                    # Kneser-Ney discounts are estimated from counts-of-counts, which a small
                    # corpus (a small language's Wikipedia, a test) can leave at zero; the
                    # fallback discounts keep training from aborting.
                    "--discount_fallback",
                    # lmplz rejects literal <s>, </s>, <unk> in its input; treat them as spaces.
                    "--skip_symbols",
                    "-S", memory,
                    "-T", f"{scratch}/",
                ],
                stdin=stdin,
                stdout=stdout,
            )  # fmt: skip
        pieces_file.unlink()

        kenlm_binary = staging / KENLM_BINARY_FILE
        # trie: about half the size of probing, which matters because every Spark Python worker
        # loads its own copy; probing's speed edge is small next to SentencePiece and the
        # normalisation, which dominate scoring.
        _run_tool(
            [
                str(build_binary_path),
                "-S", memory,
                "-T", f"{scratch}/",
                "trie", str(arpa), str(kenlm_binary),
            ]
        )  # fmt: skip
        shutil.rmtree(scratch)

        files = LanguageModelFiles(
            sp_model=out_dir / SP_MODEL_FILE,
            kenlm_binary=out_dir / KENLM_BINARY_FILE,
            order=order,
            vocab_size=sp.get_piece_size(),
            fingerprint=model_fingerprint(sp_model, kenlm_binary),
            tokens=tokens,
        )
        manifest = {k: v for k, v in asdict(files).items() if not isinstance(v, Path)}
        manifest["seed"] = seed
        (staging / MANIFEST_FILE).write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        _replace_dir(staging, out_dir)
        return files
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# --- scoring --------------------------------------------------------------------------------


class PerplexityScorer:
    """Scores documents with one (SentencePiece, KenLM) pair. Get one with `load`, which
    shares loaded models within the process; construct directly only for a private copy."""

    # (sp path, kenlm path) -> (the files' (mtime, size), scorer)
    _cache: dict[tuple[str, str], tuple[tuple[int, ...], PerplexityScorer]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, sp_model: str | Path, kenlm_binary: str | Path) -> None:
        import kenlm
        import sentencepiece as spm

        self.sp_model = Path(sp_model)
        self.kenlm_binary = Path(kenlm_binary)
        self._sp = spm.SentencePieceProcessor(model_file=str(self.sp_model))
        self._lm = kenlm.Model(str(self.kenlm_binary))

    @classmethod
    def load(cls, sp_model: str | Path, kenlm_binary: str | Path) -> PerplexityScorer:
        """The scorer for these model files, loaded once per process: a Spark Python worker
        calls this per batch and pays the load (hundreds of MB for a real model) only once.
        A model retrained in place (new mtime or size) is reloaded, replacing the stale one
        rather than being served from the cache."""
        paths = (Path(sp_model).resolve(), Path(kenlm_binary).resolve())
        key = (str(paths[0]), str(paths[1]))
        version = tuple(n for p in paths for n in (p.stat().st_mtime_ns, p.stat().st_size))
        with cls._cache_lock:
            cached = cls._cache.get(key)
            if cached is None or cached[0] != version:
                cached = (version, cls(*paths))
                cls._cache[key] = cached
            return cached[1]

    def __reduce__(self) -> tuple[Any, ...]:
        # The native models cannot be pickled; a scorer shipped to an executor (e.g. captured
        # in a UDF closure) is rebuilt there from its paths, through the per-process cache.
        return (PerplexityScorer.load, (str(self.sp_model), str(self.kenlm_binary)))

    def _lines(self, text: str | None) -> list[str]:
        return normalise_for_lm(text).split("\n") if text else []

    def _score(self, pieces_per_line: Iterator[list[str]]) -> float | None:
        log10_prob = 0.0
        tokens = 0
        for pieces in pieces_per_line:
            if not pieces:
                continue
            log10_prob += self._lm.score(" ".join(pieces), bos=True, eos=True)
            tokens += len(pieces) + 1  # + 1: the </s> that score() includes
        if tokens == 0:
            return None
        return round(10.0 ** (-log10_prob / tokens), 2)

    def perplexity(self, text: str) -> float | None:
        """Perplexity of one document; None when it has no tokens (empty or whitespace)."""
        lines = [line for line in self._lines(text) if line]
        if not lines:
            return None
        return self._score(iter(self._sp.encode(lines, out_type=str, num_threads=1)))

    def perplexities(self, texts: Sequence[str]) -> list[float | None]:
        """Perplexity of each document. All lines of the batch are tokenised in one
        SentencePiece call, which is cheaper than one call per document. One thread: Spark
        already runs one Python worker per core."""
        per_doc = [[line for line in self._lines(text) if line] for text in texts]
        flat = [line for lines in per_doc for line in lines]
        pieces = iter(self._sp.encode(flat, out_type=str, num_threads=1)) if flat else iter(())
        out: list[float | None] = []
        for lines in per_doc:
            out.append(self._score(next(pieces) for _ in lines) if lines else None)
        return out


def bucket(perplexity: float | None, p30: float, p60: float) -> str | None:
    """cc_net's split: "head" up to the 30th percentile of the language's perplexities,
    "middle" up to the 60th, "tail" above; None when the document has no perplexity."""
    if p30 > p60:
        raise ValueError(f"p30 ({p30}) must not exceed p60 ({p60})")
    if perplexity is None:
        return None
    if perplexity <= p30:
        return "head"
    if perplexity <= p60:
        return "middle"
    return "tail"

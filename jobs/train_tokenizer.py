"""Trains the SentencePiece tokenizer on a seeded sample of the clean table.

    spark-submit jobs/train_tokenizer.py --root lake [--set tokenizer.vocab_size=32000]

Reads `clean` (else the newest cleaned table; --input-table), pinned at its current version.
A document is in the sample when a hash of (doc_id, tokenizer.seed) falls under
tokenizer.sample_fraction; sampled documents are streamed to the driver in doc_id order until
tokenizer.max_sample_chars, one paragraph per line. SentencePiece then trains single-threaded
with its random generator seeded, so the same seed and table version give a byte-identical
model.

Writes `<root>/tokenizer/<sha256[:16]>/tokenizer.model` and `tokenizer.json` (hash, vocabulary
size, special ids, input table and version, sample size), then `<root>/tokenizer/latest.json`
(the commit: jobs/tokenize_shards.py uses the model it names).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenmill.jobs.runtime import (
    JobContext,
    JobError,
    job_parser,
    pick_input_table,
    put_file,
    run_job,
)
from tokenmill.schemas.tables import CLEAN_NAME, DEDUPED_NAME, Table

JOB = "train_tokenizer"
TOKENIZER_DIR = "tokenizer"
LATEST = "latest.json"
INPUTS = (CLEAN_NAME, DEDUPED_NAME, "quality", "urlfilter", "langid", "docs")
# SentencePiece skips longer "sentences" silently; paragraphs are split on lines and this is
# raised from its 4,192-byte default so that long paragraphs are not lost.
MAX_SENTENCE_BYTES = 16_384
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


def sample_lines(ctx: JobContext, source: str, out: Path) -> dict[str, int]:
    """Writes the sample to `out`, one paragraph per line; returns its size."""
    from pyspark.sql import functions as F

    cfg = ctx.config.tokenizer
    df = ctx.read_table(Table(source, None, 0, ("doc_id",), ""))
    bucket = F.abs(F.xxhash64("doc_id", F.lit(cfg.seed))) % F.lit(1_000_000)
    sampled = (
        df.where(bucket < F.lit(int(cfg.sample_fraction * 1_000_000)))
        .select("doc_id", "text").orderBy("doc_id")
    )
    docs = chars = lines = 0
    with open(out, "w", encoding="utf-8") as f:
        for row in sampled.toLocalIterator():
            text = row["text"] or ""
            for line in text.split("\n"):
                line = line.strip()
                if not line:
                    continue
                limit = MAX_SENTENCE_BYTES // 4  # characters: at most 4 UTF-8 bytes each
                while len(line.encode("utf-8")) > MAX_SENTENCE_BYTES:
                    cut = line.rfind(" ", 0, limit)
                    cut = cut if cut > 0 else limit
                    f.write(line[:cut] + "\n")
                    line = line[cut:].lstrip()
                    lines += 1
                f.write(line + "\n")
                lines += 1
            docs += 1
            chars += len(text)
            if chars >= cfg.max_sample_chars:
                break
    if not lines:
        raise JobError(f"the sample of {source!r} is empty: nothing to train a tokenizer on")
    return {"documents": docs, "chars": chars, "lines": lines}


def train(lines_file: Path, cfg: Any) -> bytes:
    import io

    import sentencepiece as spm

    def lines() -> Any:
        # An iterator, not input=path: the path would be recorded in the model's trainer spec
        # and make two identical trainings differ.
        with open(lines_file, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")

    spm.set_random_generator_seed(cfg.seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=lines(),
        model_writer=model,
        model_type=cfg.model_type,
        vocab_size=cfg.vocab_size,
        # A sample smaller than the vocabulary needs gets the largest vocabulary it supports.
        hard_vocab_limit=False,
        byte_fallback=cfg.byte_fallback,
        character_coverage=cfg.character_coverage,
        # As LLaMA's tokenizer: no normalisation and whitespace kept, so decode(encode(text))
        # is the text, newlines included (they come out as byte tokens); digits split.
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        max_sentence_length=MAX_SENTENCE_BYTES,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


def train_tokenizer(ctx: JobContext) -> None:
    import sentencepiece as spm

    cfg = ctx.config.tokenizer
    source = pick_input_table(ctx, INPUTS)
    with tempfile.TemporaryDirectory(prefix="tokenmill-spm-") as tmp:
        lines_file = Path(tmp) / "sample.txt"
        with ctx.step("sample the clean table"):
            size = sample_lines(ctx, source, lines_file)
        with ctx.step("train SentencePiece"):
            model = train(lines_file, cfg)
        sha = hashlib.sha256(model).hexdigest()
        vocab = spm.SentencePieceProcessor(model_proto=model).get_piece_size()
        meta = {
            "sha256": sha,
            "path": f"{sha[:16]}/tokenizer.model",
            "vocab_size": vocab,
            "requested_vocab_size": cfg.vocab_size,
            "model_type": cfg.model_type,
            "byte_fallback": cfg.byte_fallback,
            "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID,
            "input_table": source,
            "input_version": ctx.input_version,
            "seed": cfg.seed,
            "sample": size,
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "run_id": ctx.run_id,
        }
        base = ctx.path(TOKENIZER_DIR)
        with ctx.step("write the model"):
            (Path(tmp) / "tokenizer.model").write_bytes(model)
            (Path(tmp) / "tokenizer.json").write_text(json.dumps(meta, indent=2) + "\n")
            put_file(ctx.spark, Path(tmp) / "tokenizer.model", f"{base}/{sha[:16]}/tokenizer.model")
            put_file(ctx.spark, Path(tmp) / "tokenizer.json", f"{base}/{sha[:16]}/tokenizer.json")
            put_file(ctx.spark, Path(tmp) / "tokenizer.json", f"{base}/{LATEST}")
    ctx.rows_in = size["documents"]
    ctx.counts.update({"sample_docs": size["documents"], "sample_chars": size["chars"],
                       "vocab_size": vocab})
    ctx.output_table = TOKENIZER_DIR
    ctx.notes.append(f"sha256={sha[:16]}")
    if vocab < cfg.vocab_size:
        ctx.notes.append(f"vocab={vocab}<{cfg.vocab_size}(small sample)")


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Train the SentencePiece tokenizer on a seeded sample.")
    parser.add_argument("--input-table", help=f"table to sample (default: first of {INPUTS})")
    return run_job(JOB, parser, train_tokenizer, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Trains the perplexity models the quality stage scores with (cc_net's method): per language,
a SentencePiece model and a 5-gram KenLM model on its pieces.

    spark-submit jobs/train_lm.py --root lake [--reference DIR]

The reference corpus is a folder of `<lang>.txt` files, one document per line (for example
Wikipedia text; `--reference` or perplexity.reference), or, when none is given, a sample the
project generates (clean articles of the sample-crawl grammar). KenLM's `lmplz` and
`build_binary` come from `make kenlm` (.tools/kenlm/bin, or $TOKENMILL_KENLM_BIN).

Writes `<root>/models/lm/<lang>/` : `<lang>-<fingerprint>.sp.model`, `…kenlm.bin` and, last,
`model.json` (the commit: a model without it is never used). Same reference, seed and
settings give byte-identical models.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tokenmill.jobs.runtime import (
    REPO_ROOT,
    JobContext,
    JobError,
    job_parser,
    put_file,
    run_job,
)

JOB = "train_lm"
MODELS_DIR = "models/lm"
KENLM_BIN_ENV = "TOKENMILL_KENLM_BIN"


def kenlm_tools() -> tuple[Path, Path]:
    bin_dir = Path(os.environ.get(KENLM_BIN_ENV, REPO_ROOT / ".tools" / "kenlm" / "bin"))
    tools = (bin_dir / "lmplz", bin_dir / "build_binary")
    for tool in tools:
        if not os.access(tool, os.X_OK):
            raise JobError(f"KenLM's {tool.name} not found in {bin_dir}: run `make kenlm` "
                           f"(or set {KENLM_BIN_ENV})")
    return tools


def reference_texts(reference: str | None, lang: str, docs: int, seed: int) -> list[str]:
    if reference is None:
        from tokenmill.jobs.sample_crawl import reference_corpus

        return reference_corpus(lang, docs, seed)
    path = Path(reference) / f"{lang}.txt"
    if not path.is_file():
        raise JobError(f"perplexity.reference: no {lang}.txt in {reference}")
    with open(path, encoding="utf-8", errors="replace") as f:
        texts = [line.strip() for line in f if line.strip()]
    if not texts:
        raise JobError(f"perplexity.reference: {path} is empty")
    return texts


def train_lm(ctx: JobContext) -> None:
    from tokenmill.udfs.perplexity import train_language_model

    cfg = ctx.config.perplexity
    reference = ctx.args.reference or cfg.reference
    lmplz, build_binary = kenlm_tools()
    for lang in cfg.languages:
        with ctx.step(f"train {lang} model"):
            texts = reference_texts(reference, lang, cfg.reference_docs, cfg.seed)
            with tempfile.TemporaryDirectory(prefix="tokenmill-lm-") as tmp:
                files = train_language_model(
                    texts, Path(tmp) / lang, order=cfg.order, vocab_size=cfg.vocab_size,
                    seed=cfg.seed, lmplz=lmplz, build_binary=build_binary,
                )
                base = f"{ctx.path(MODELS_DIR)}/{lang}"
                stem = f"{lang}-{files.fingerprint[:12]}"
                put_file(ctx.spark, files.sp_model, f"{base}/{stem}.sp.model")
                put_file(ctx.spark, files.kenlm_binary, f"{base}/{stem}.kenlm.bin")
                meta = {
                    "lang": lang,
                    "sp_model": f"{stem}.sp.model",
                    "kenlm": f"{stem}.kenlm.bin",
                    "fingerprint": files.fingerprint,
                    "order": files.order,
                    "vocab_size": files.vocab_size,
                    "tokens": files.tokens,
                    "documents": len(texts),
                    "reference": reference or f"generated:{cfg.reference_docs}:{cfg.seed}",
                    "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "run_id": ctx.run_id,
                }
                meta_file = Path(tmp) / "model.json"
                meta_file.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
                put_file(ctx.spark, meta_file, f"{base}/model.json")
            ctx.counts[f"{lang}_documents"] = len(texts)
            ctx.counts[f"{lang}_tokens"] = files.tokens
    ctx.output_table = MODELS_DIR
    ctx.notes.append(f"languages={','.join(cfg.languages)}")


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Train the per-language perplexity models (SentencePiece + KenLM).")
    parser.add_argument(
        "--reference", help="folder of <lang>.txt reference files (default: perplexity.reference)"
    )
    return run_job(JOB, parser, train_lm, argv)


if __name__ == "__main__":
    raise SystemExit(main())

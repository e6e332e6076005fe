"""Quarantine files: the documents a trainer blames for a loss spike, which the tokenize job
leaves out of its next run (layout in FORMAT.md, "Quarantine").

A quarantine file is JSON lines, one `QuarantineEntry` a line, under `<root>/quarantine/`
(`quarantine.path` in the pipeline config). The trainer writes the files with
`write_entries`; `jobs/tokenize_shards.py` reads every `*.jsonl` there with `parse_entries`.

Standard library only: the trainer imports this module, and it has no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from tokenmill.tokenize.files import write_text_atomic

SUFFIX = ".jsonl"  # the tokenize job reads `*.jsonl` only, so temporaries never match
_INT_FIELDS = ("doc_index", "step", "sample")
_STR_FIELDS = ("shard", "source", "reason", "train_run")


@dataclass(frozen=True)
class QuarantineEntry:
    """One document of a batch the trainer rejected."""

    # From the shard's .docids sidecar; None when the shard has none, and the pipeline then
    # looks (shard, doc_index) up in `shard_docs`.
    doc_id: str | None
    shard: str  # as shard_docs.shard spells it: <run_id>/<source>/part-NNNNN
    doc_index: int  # the document's position in that shard's .idx
    source: str
    reason: str  # why the trainer rejected the batch, e.g. "loss_spike"
    step: int  # the optimizer step at which it did
    train_run: str
    sample: int  # global index of the training sample that held the document

    def to_json(self) -> str:
        # ensure_ascii keeps every line plain ASCII, whatever the doc ids hold.
        return json.dumps(asdict(self), ensure_ascii=True, sort_keys=True)


def entry_from_json(line: str, where: str) -> QuarantineEntry:
    """One line of a quarantine file; ``where`` (file:line) prefixes every error."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("doc_id", *_STR_FIELDS, *_INT_FIELDS) if k not in obj]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    # Keys beyond these are ignored: a newer trainer may record more (the loss, a batch id).
    if obj["doc_id"] is not None and not isinstance(obj["doc_id"], str):
        raise ValueError(f"{where}: doc_id must be a string or null, got {obj['doc_id']!r}")
    for k in _STR_FIELDS:
        if not isinstance(obj[k], str):
            raise ValueError(f"{where}: {k} must be a string, got {obj[k]!r}")
    for k in _INT_FIELDS:
        # bool is an int in Python; true/false here is a writer bug, not an index.
        if not isinstance(obj[k], int) or isinstance(obj[k], bool) or obj[k] < 0:
            raise ValueError(f"{where}: {k} must be an integer >= 0, got {obj[k]!r}")
    return QuarantineEntry(**{k: obj[k] for k in ("doc_id", *_STR_FIELDS, *_INT_FIELDS)})


def parse_entries(text: str, where: str) -> list[QuarantineEntry]:
    """The entries in one file's text (``where`` names the file in errors). Blank lines are
    skipped; any other line that is not a valid entry raises ValueError naming file:line."""
    return [
        entry_from_json(line, f"{where}:{n}")
        for n, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]


def read_entries(paths: Iterable[str | Path]) -> list[QuarantineEntry]:
    """Every entry of these local files, in file then line order."""
    entries: list[QuarantineEntry] = []
    for path in paths:
        entries.extend(parse_entries(Path(path).read_text(encoding="utf-8"), str(path)))
    return entries


def write_entries(path: str | Path, entries: Iterable[QuarantineEntry]) -> Path:
    """Writes ``entries`` to the local file ``path`` (``.jsonl``), after the lines it already
    holds if it exists. Either way the whole file is written under a temporary name and
    renamed, so the tokenize job, which may list the folder at any moment, sees the old file
    or the new one and never a half-written line. Appending rewrites the file, which is cheap
    for the few lines a spike adds; it assumes one writer per file (one per training run)."""
    path = Path(path)
    if not path.name.endswith(SUFFIX):
        raise ValueError(f"{path}: quarantine files end with {SUFFIX}, or the job skips them")
    lines = "".join(e.to_json() + "\n" for e in entries)
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = ""
    if old and not old.endswith("\n"):
        old += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Hidden and not ending in .jsonl: no reader's glob picks the temporary up.
    return write_text_atomic(path, old + lines, hidden=True)

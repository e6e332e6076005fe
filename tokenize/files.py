"""Small-file writes that readers see whole or not at all (manifests, quarantine files,
trainer state): temporary file, fsync, rename."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, hidden: bool = False) -> Path:
    """Replace ``path`` with ``text`` in one rename. ``hidden`` names the temporary
    ``.<name>.tmp-…``, so a glob on the final suffix (``*.jsonl``) never picks it up."""
    path = Path(path)
    tmp = path.with_name(f"{'.' if hidden else ''}{path.name}.tmp-{secrets.token_hex(8)}")
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

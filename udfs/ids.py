"""Stable document ids.

A doc_id is 32 lowercase hex characters. It never changes across reruns, so every later stage
(rejections, dedup clusters, token-shard indices) can point back at the same document.
"""

from __future__ import annotations

import hashlib
import uuid

_UUID_PREFIX = "urn:uuid:"


def _digest(*parts: str) -> str:
    h = hashlib.sha1()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


def doc_id_from_record_id(record_id: str) -> str:
    """doc_id of a WARC record: its UUID as hex when the WARC-Record-ID is a urn:uuid (the
    common case, readable in both places), else a hash of the id as written."""
    raw = record_id.strip().strip("<>").strip()
    if raw.lower().startswith(_UUID_PREFIX):
        try:
            return uuid.UUID(raw[len(_UUID_PREFIX):]).hex
        except ValueError:
            pass
    return _digest("warc-record-id", raw)


def doc_id_from_source_key(source: str, key: str) -> str:
    """doc_id of a non-WARC document (JSONL/Parquet sources): the source and its own key."""
    return _digest("source", source, key)


def doc_id_from_location(path: str, offset: int) -> str:
    """Id for an unreadable region of an input file, which has no record id of its own."""
    return _digest("location", path, str(offset))

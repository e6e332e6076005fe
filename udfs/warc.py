"""WARC file → document rows, rejection rows and one file summary. No Spark here: the job
runs `read_warc_file` inside Spark tasks; tests run it on bytes in memory.

Reading never gives up on a file because of one bad spot. fastwarc stops with an error at a
corrupt gzip member or WARC header; we then look for the next gzip member (or the next
`WARC/1.` line in an uncompressed file) and go on from there, counting the damaged region once
as `corrupt_record`. Every record is accounted for: kept, rejected with a reason, or (request,
metadata, warcinfo … records) counted as not a document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import IO, Any

from fastwarc.warc import ArchiveIterator, WarcRecordType

from tokenmill.udfs.html import bad_char_fraction, decode_html, extract_text
from tokenmill.udfs.ids import doc_id_from_location, doc_id_from_record_id
from tokenmill.udfs.text import text_hash
from tokenmill.udfs.urls import host_and_domain

OpenAt = Callable[[int], IO[bytes]]  # opens the file positioned at a byte offset

_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_MAGIC = b"WARC/1."
_CRAWL_ID = re.compile(r"CC-MAIN-\d{4}-\d{2}")
_IS_PART_OF = re.compile(rb"isPartOf:\s*(\S+)")
_SCAN_CHUNK = 1 << 20


@dataclass(frozen=True)
class WarcReadOptions:
    max_html_bytes: int = 2_000_000
    max_bad_char_fraction: float = 0.05
    html_content_types: tuple[str, ...] = ("text/html", "application/xhtml+xml")
    extractor: str = "resiliparse"
    main_content: bool = True
    min_text_chars: int = 1
    source: str = "cc"


def _find_next(open_at: OpenAt, start: int, magic: bytes) -> int | None:
    """Offset of the next `magic` at or after `start`, reading forward in chunks."""
    with open_at(start) as f:
        base, carry = start, b""
        while chunk := f.read(_SCAN_CHUNK):
            buf = carry + chunk
            i = buf.find(magic)
            if i >= 0:
                return base - len(carry) + i
            carry = buf[-(len(magic) - 1) :]
            base += len(chunk)
    return None


def _looks_like_html(head: bytes) -> bool:
    probe = head[:1024].lstrip().lower()
    return probe.startswith(b"<") and (b"<html" in probe or b"<!doctype html" in probe)


def _reject(
    doc_id: str, url: str | None, reason: str, path: str, offset: int, **signals: Any
) -> dict[str, Any]:
    return {
        "kind": "reject",
        "doc_id": doc_id,
        "url": url,
        "reason": reason,
        "signals": {k: str(v) for k, v in signals.items()},
        "warc_path": path,
        "record_offset": offset,
    }


def _response_row(
    rec: Any, path: str, offset: int, crawl_id: str | None, opts: WarcReadOptions
) -> dict[str, Any]:
    headers = rec.headers
    url = headers.get("WARC-Target-URI")
    record_id = headers.get("WARC-Record-ID")
    doc_id = doc_id_from_record_id(record_id) if record_id else doc_id_from_location(path, offset)

    if not rec.is_http:  # e.g. Heritrix's `dns:` responses: a WARC response, not HTTP
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        return _reject(doc_id, url, "not_html", path, offset, content_type=ctype)
    http = rec.http_headers
    if http is None or http.status_code is None:
        return _reject(doc_id, url, "bad_http", path, offset)
    if http.status_code != 200:
        return _reject(doc_id, url, "http_status", path, offset, status=http.status_code)

    declared = rec.content_length  # payload bytes the record says it holds
    if declared > opts.max_html_bytes:
        return _reject(doc_id, url, "too_large", path, offset, bytes=declared)
    payload = rec.reader.read(opts.max_html_bytes + 1)
    content_type = (rec.http_content_type or "").strip().lower()
    if not content_type and _looks_like_html(payload):
        content_type = "text/html"
    if content_type not in opts.html_content_types:
        return _reject(doc_id, url, "not_html", path, offset, content_type=content_type or "")
    if len(payload) > opts.max_html_bytes:
        return _reject(doc_id, url, "too_large", path, offset, bytes=len(payload))
    if len(payload) < declared:
        return _reject(
            doc_id, url, "truncated_record", path, offset, bytes=len(payload), declared=declared
        )

    charset, html = decode_html(payload, rec.http_charset)
    bad = bad_char_fraction(html)
    if bad > opts.max_bad_char_fraction:
        return _reject(
            doc_id, url, "undecodable", path, offset, charset=charset, bad_fraction=round(bad, 4)
        )
    try:
        text = extract_text(html, opts.extractor, opts.main_content)
    except Exception as e:  # noqa: BLE001 - one pathological page must not stop the file
        return _reject(doc_id, url, "extract_error", path, offset, error=type(e).__name__)
    if len(text) < opts.min_text_chars:
        return _reject(doc_id, url, "empty_text", path, offset, chars=len(text))

    host, domain = host_and_domain(url)
    fetch_time = rec.record_date
    if fetch_time is not None and fetch_time.tzinfo is None:
        fetch_time = fetch_time.replace(tzinfo=UTC)
    return {
        "kind": "doc",
        "doc_id": doc_id,
        "source": opts.source,
        "url": url,
        "host": host,
        "domain": domain,
        "crawl_id": crawl_id,
        "warc_path": path,
        "record_offset": offset,
        "fetch_time": fetch_time,
        "content_type": content_type,
        "charset": charset,
        "html_bytes": len(payload),
        "text": text,
        "text_length": len(text),
        "text_hash": text_hash(text),
    }


def read_warc_file(
    path: str, open_at: OpenAt, opts: WarcReadOptions, size: int | None = None
) -> Iterator[dict[str, Any]]:
    """Yields one row per response record (kind `doc` or `reject`), one `reject` row per
    damaged region, and finally one `file` row with the file's counts and status."""
    stats = {"records": 0, "responses": 0, "docs": 0, "rejected": 0, "other": 0}
    errors: list[str] = []
    crawl_match = _CRAWL_ID.search(path)
    crawl_id = crawl_match.group(0) if crawl_match else None

    def file_row(status: str, error: str | None, reason: str | None = None) -> dict[str, Any]:
        return {"kind": "file", "warc_path": path, "status": status, "error": error,
                "reason": reason, "bytes": size, **stats}

    try:
        with open_at(0) as f:
            head = f.read(4)
    except Exception as e:  # noqa: BLE001 - any failure to open marks the file failed
        yield file_row("failed", f"{type(e).__name__}: {e}", "unreadable_file")
        return
    if not head:
        yield file_row("done", "empty file", "empty_file")
        return
    magic = _GZIP_MAGIC if head[:2] == _GZIP_MAGIC[:2] else _WARC_MAGIC

    pos: int | None = 0
    in_damage = False  # consecutive failed restarts belong to one damaged region
    while pos is not None:
        last: int | None = None
        try:
            with open_at(pos) as stream:
                for rec in ArchiveIterator(stream, parse_http=True):
                    offset = pos + rec.stream_pos
                    last = offset
                    stats["records"] += 1
                    rtype = rec.record_type
                    if rtype == WarcRecordType.response:
                        stats["responses"] += 1
                        row = _response_row(rec, path, offset, crawl_id, opts)
                        stats["docs" if row["kind"] == "doc" else "rejected"] += 1
                        in_damage = False
                        yield row
                    else:
                        stats["other"] += 1
                        in_damage = False
                        if rtype == WarcRecordType.warcinfo:
                            m = _IS_PART_OF.search(rec.reader.read(65536))
                            if m:
                                crawl_id = m.group(1).decode("utf-8", "replace")
            pos = None  # reached the end cleanly
        except Exception as e:  # noqa: BLE001 - fastwarc raises OSError/ValueError on damage
            where = last if last is not None else pos
            if not in_damage:
                in_damage = True
                errors.append(f"{type(e).__name__} at byte {where}: {e}")
                stats["rejected"] += 1
                yield _reject(
                    doc_id_from_location(path, where), None, "corrupt_record", path, where,
                    error=f"{type(e).__name__}: {e}",
                )
            pos = _find_next(open_at, where + 1, magic)

    if stats["records"] == 0 and errors:
        yield file_row("failed", "no readable WARC record: " + errors[0], None)
    else:
        yield file_row("done", "; ".join(errors) or None)

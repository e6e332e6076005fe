"""WARC reading without Spark: every bad-input case is counted with its reason and reading
goes on. Records are built here byte by byte; real crawl files come from ../shared/data."""

from __future__ import annotations

import gzip
import io
import os
import uuid
from collections import Counter

import pytest
from conftest import shared_sample

from tokenmill.udfs.html import bad_char_fraction, choose_charset, decode_html, extract_text
from tokenmill.udfs.ids import doc_id_from_location, doc_id_from_record_id, doc_id_from_source_key
from tokenmill.udfs.text import normalise_for_dedup, text_hash
from tokenmill.udfs.urls import host_and_domain
from tokenmill.udfs.warc import WarcReadOptions, read_warc_file

PAGE = (
    b"<html><head><title>t</title></head><body><nav><a href='/'>Home</a></nav><main><article>"
    b"<h1>Weather notes</h1><p>The morning was cold and the river carried ice down to the "
    b"harbour.</p><p>By noon the sun had returned and the market opened again.</p>"
    b"</article></main></body></html>"
)


def record(i: int, http: bytes, *, rtype: str = "response", is_http: bool = True) -> bytes:
    ctype = f"application/http; msgtype={rtype}" if is_http else "text/dns"
    head = (
        f"WARC/1.0\r\nWARC-Type: {rtype}\r\nWARC-Record-ID: <urn:uuid:{uuid.UUID(int=i)}>\r\n"
        f"WARC-Date: 2024-03-01T10:00:00Z\r\nWARC-Target-URI: http://www.example.co.uk/{i}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(http)}\r\n\r\n"
    ).encode()
    return head + http + b"\r\n\r\n"


def response(body: bytes = PAGE, status: str = "200 OK", ctype: str = "text/html") -> bytes:
    headers = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return headers.encode() + body


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def read(data: bytes, opts: WarcReadOptions | None = None, path: str = "mem.warc.gz"):
    def open_at(offset: int):
        return io.BytesIO(data[offset:])

    rows = list(read_warc_file(path, open_at, opts or WarcReadOptions(), len(data)))
    outcomes = Counter(r["reason"] if r["kind"] == "reject" else r["kind"] for r in rows[:-1])
    assert rows[-1]["kind"] == "file"
    return rows, outcomes, rows[-1]


def test_good_page_becomes_a_document():
    rows, outcomes, file_row = read(gz(record(1, response())))
    assert outcomes == {"doc": 1}
    doc = rows[0]
    assert doc["doc_id"] == uuid.UUID(int=1).hex
    assert doc["host"] == "www.example.co.uk" and doc["domain"] == "example.co.uk"
    assert "river carried ice" in doc["text"] and "Home" not in doc["text"]
    assert doc["text_hash"] == text_hash(doc["text"])
    assert doc["html_bytes"] == len(PAGE)
    assert doc["fetch_time"].year == 2024 and doc["fetch_time"].tzinfo is not None
    assert file_row["status"] == "done" and file_row["responses"] == 1


@pytest.mark.parametrize(
    ("http", "reason"),
    [
        (response(status="404 Not Found"), "http_status"),
        (response(status="301 Moved Permanently"), "http_status"),
        (response(ctype="image/jpeg", body=b"\xff\xd8\xff\xe0" + os.urandom(300)), "not_html"),
        (b"HTP/1.1 two-hundred OK\r\nbroken header line\r\n\r\n<html></html>", "bad_http"),
        (response(body=b"<html><body>" + bytes(range(256)) * 10 + b"</body></html>"),
         "undecodable"),
        (response(body=b"<html><head><script>var a=1;</script></head><body></body></html>"),
         "empty_text"),
        (response(body=b"<html><body><p>" + b"x" * 5000 + b"</p></body></html>"), "too_large"),
    ],
)
def test_each_bad_record_is_counted_with_its_reason(http, reason):
    opts = WarcReadOptions(max_html_bytes=4000)
    data = gz(record(1, http)) + gz(record(2, response()))
    rows, outcomes, file_row = read(data, opts)
    assert outcomes == {reason: 1, "doc": 1}, outcomes
    assert file_row["rejected"] == 1 and file_row["docs"] == 1


def test_non_http_response_is_not_html():
    rows, outcomes, _ = read(gz(record(1, b"example.com. 300 IN A 1.2.3.4", is_http=False)))
    assert outcomes == {"not_html": 1}


def test_other_record_types_are_counted_not_rejected():
    data = gz(record(1, b"GET / HTTP/1.1\r\n\r\n", rtype="request")) + gz(record(2, response()))
    _, outcomes, file_row = read(data)
    assert outcomes == {"doc": 1}
    assert file_row["records"] == 2 and file_row["other"] == 1


def test_garbage_between_members_is_one_corrupt_record_and_reading_goes_on():
    members = [gz(record(i, response())) for i in range(1, 5)]
    garbage = os.urandom(300).replace(b"\x1f\x8b", b"..")
    data = members[0] + members[1] + garbage + members[2] + members[3]
    rows, outcomes, file_row = read(data)
    assert outcomes == {"doc": 4, "corrupt_record": 1}
    corrupt = next(r for r in rows if r.get("reason") == "corrupt_record")
    assert corrupt["doc_id"] == doc_id_from_location("mem.warc.gz", corrupt["record_offset"])
    assert file_row["status"] == "done" and "at byte" in file_row["error"]


def test_truncated_member_in_the_middle_loses_only_that_record():
    members = [gz(record(i, response())) for i in range(1, 5)]
    broken = members[2][: len(members[2]) // 2]
    rows, outcomes, _ = read(members[0] + members[1] + broken + members[3])
    kept = {r["doc_id"] for r in rows if r["kind"] == "doc"}
    assert kept == {uuid.UUID(int=i).hex for i in (1, 2, 4)}
    assert outcomes["corrupt_record"] + outcomes["truncated_record"] == 1


def test_file_cut_short_gives_a_truncated_record():
    members = [gz(record(i, response(body=PAGE * 20))) for i in range(1, 3)]
    data = members[0] + members[1][:-200]
    _, outcomes, file_row = read(data)
    assert outcomes == {"doc": 1, "truncated_record": 1}
    assert file_row["status"] == "done"


def test_uncompressed_warc_with_damage_resyncs_on_warc_lines():
    data = record(1, response()) + b"\x00garbage\x00" * 10 + record(2, response())
    _, outcomes, _ = read(data, path="mem.warc")
    assert outcomes == {"doc": 2, "corrupt_record": 1}


def test_empty_and_unreadable_files():
    _, outcomes, file_row = read(b"")
    assert not outcomes and file_row["status"] == "done" and file_row["reason"] == "empty_file"

    _, outcomes, file_row = read(b"this is not a WARC file\n" * 20)
    assert file_row["status"] == "failed" and "no readable WARC record" in file_row["error"]

    def missing(offset: int):
        raise FileNotFoundError("/nope.warc.gz")

    rows = list(read_warc_file("/nope.warc.gz", missing, WarcReadOptions()))
    assert rows == [rows[-1]] and rows[0]["status"] == "failed"
    assert rows[0]["reason"] == "unreadable_file" and "FileNotFoundError" in rows[0]["error"]


def test_charset_from_header_meta_or_detection():
    latin = "<html><body><p>Grüße aus München</p></body></html>".encode("latin-1")
    assert decode_html(latin, "iso-8859-1") == ("cp1252", latin.decode("latin-1"))
    cyr = '<html><head><meta charset="windows-1251"></head><body>Привет, мир</body></html>'
    charset, text = decode_html(cyr.encode("cp1251"), None)
    assert charset == "cp1251" and "Привет" in text
    assert choose_charset(None, "Здравствуйте, как дела сегодня".encode("cp1251") * 5) == "cp1251"
    assert bad_char_fraction("abc\ufffd") == 0.25
    assert bad_char_fraction("tab\tnewline\n") == 0.0


def test_trafilatura_is_selectable():
    html = PAGE.decode()
    assert "river carried ice" in extract_text(html, "trafilatura")


def test_ids_urls_and_normalisation():
    rid = "<urn:uuid:f3dfa8fa-f031-4a38-90cc-1dcee3d07bb5>"
    assert doc_id_from_record_id(rid) == "f3dfa8faf0314a3890cc1dcee3d07bb5"
    assert len(doc_id_from_record_id("<http://example/record/1>")) == 32
    assert doc_id_from_source_key("wikipedia", "12") != doc_id_from_source_key("books", "12")
    assert host_and_domain("https://a.b.example.com.au/x") == ("a.b.example.com.au",
                                                                 "example.com.au")
    assert host_and_domain("not a url") == (None, None)
    assert normalise_for_dedup("Café  «Zürich», 2024!") == "cafe zurich 0000"
    assert text_hash("Hello, World 1") == text_hash("hello world 7")


def test_real_clipped_record_is_truncated():
    path = shared_sample("clipped.warc.gz")
    data = path.read_bytes()
    _, outcomes, _ = read(data, path=str(path))
    assert outcomes == {"truncated_record": 1}


def test_real_crawl_files_read_to_the_end():
    # A 2009 crawl with DNS records, images and redirects, and a truncated 2008 file.
    for name, responses in (("crawl-2009.warc.gz", 299), ("ia-2008-truncated.warc.gz", 8)):
        data = shared_sample(name).read_bytes()
        rows, outcomes, file_row = read(data, path=name)
        assert file_row["status"] == "done"
        assert file_row["responses"] == responses == sum(outcomes.values())
        assert outcomes["doc"] > 0

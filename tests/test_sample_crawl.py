"""The sample crawl is the ground truth for the ingest, cleaning, dedup and PII tests, so its
labels have to be right: these tests check them against what two independent WARC readers see.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastwarc.warc import ArchiveIterator, WarcRecordType
from warcio.archiveiterator import ArchiveIterator as WarcioIterator

from tokenmill.jobs.sample_crawl import (
    CORRUPT_RECORD,
    INGEST_REASONS,
    KEPT,
    NEAR_DUPLICATE_TARGETS,
    TRUNCATED_RECORD,
    jaccard,
    normalise_for_shingles,
    word_shingles,
    write_sample_crawl,
)
from tokenmill.udfs.ids import doc_id_from_record_id

HUGE_BYTES = 2_200_000
REPO = Path(__file__).resolve().parents[1]

_TYPE_NAMES = (
    (WarcRecordType.warcinfo, "warcinfo"),
    (WarcRecordType.request, "request"),
    (WarcRecordType.response, "response"),
    (WarcRecordType.metadata, "metadata"),
)


def _type_name(record_type: WarcRecordType) -> str:
    # fastwarc's record types compare equal but are not hashable.
    return next(name for t, name in _TYPE_NAMES if t == record_type)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("crawl")
    start = time.perf_counter()
    summary = write_sample_crawl(out)
    elapsed = time.perf_counter() - start
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text("utf-8").splitlines()]
    return {"out": out, "summary": summary, "labels": labels, "elapsed": elapsed}


def _labels_of(crawl: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [lab for lab in crawl["labels"] if lab["file"] == name]


def _damage_offset(labels: list[dict[str, Any]]) -> int | None:
    """Offset of the first damaged or truncated region of one file, None when it has none."""
    offsets = [
        lab["offset"]
        for lab in labels
        if lab["expected_ingest"] in (CORRUPT_RECORD, TRUNCATED_RECORD)
    ]
    return min(offsets) if offsets else None


def _read_fastwarc(path: Path) -> tuple[list[dict[str, Any]], Exception | None]:
    """Every record fastwarc yields until the end or its first error."""
    records: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f, parse_http=True):
                body = rec.reader.read()
                records.append({
                    "offset": rec.stream_pos,
                    "type": _type_name(rec.record_type),
                    "record_id": rec.record_id,
                    "uri": rec.headers.get("WARC-Target-URI"),
                    "body": body,
                })
    except Exception as exc:  # the damaged files are supposed to stop the reader
        return records, exc
    return records, None


def _read_warcio(path: Path) -> tuple[list[dict[str, Any]], Exception | None]:
    records: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            it = WarcioIterator(f)
            for rec in it:
                body = rec.content_stream().read()
                records.append({
                    "offset": it.get_record_offset(),
                    "type": rec.rec_type,
                    "record_id": rec.rec_headers.get_header("WARC-Record-ID"),
                    "uri": rec.rec_headers.get_header("WARC-Target-URI"),
                    "body": body,
                })
    except Exception as exc:
        return records, exc
    return records, None


def _response_at(out: Path, label: dict[str, Any]) -> dict[str, Any]:
    """The response record a label points at, read by seeking to its offset: this works for
    records behind a damaged region too."""
    with open(out / label["file"], "rb") as f:
        f.seek(label["offset"])
        rec = next(iter(ArchiveIterator(f, parse_http=True)))
        assert rec.record_id == label["record_id"]
        http = rec.http_headers
        return {
            "status": http.status_code,
            "headers": {k: http.get(k) for k in ("Content-Type", "Content-Length", "Location")
                        if http.get(k) is not None},
            "body": rec.reader.read(),
        }


def _body(out: Path, label: dict[str, Any]) -> bytes:
    return _response_at(out, label)["body"]


def _luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()][::-1]
    total = sum(digits[0::2]) + sum(sum(divmod(2 * d, 10)) for d in digits[1::2])
    return total % 10 == 0


def _iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "")
    s = s[4:] + s[:4]
    return int("".join(str(ord(c) - 55) if c.isalpha() else c for c in s)) % 97 == 1


def _sha256s(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
    }


# ------------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_bytes(crawl: dict[str, Any], tmp_path: Path) -> None:
    again = write_sample_crawl(tmp_path / "again")
    assert again == crawl["summary"]
    first, second = _sha256s(crawl["out"]), _sha256s(tmp_path / "again")
    assert len(first) == 5  # three WARC files, labels, summary
    assert first == second


def test_other_seed_gives_other_bytes(crawl: dict[str, Any], tmp_path: Path) -> None:
    other = write_sample_crawl(tmp_path / "other", seed=8)
    assert other["seed"] == 8
    first, second = _sha256s(crawl["out"]), _sha256s(tmp_path / "other")
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] != second[name], name


def test_default_run_is_fast(crawl: dict[str, Any]) -> None:
    # Budget is 3 s on a developer machine; the margin absorbs slow shared CI runners.
    assert crawl["elapsed"] < 10


def test_too_few_pages_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too small"):
        write_sample_crawl(tmp_path, pages_per_file=10)


# ------------------------------------------------------------------------- summary and labels


def test_summary_file_matches_return_value(crawl: dict[str, Any]) -> None:
    on_disk = json.loads((crawl["out"] / "labels-summary.json").read_text("utf-8"))
    assert on_disk == crawl["summary"]
    assert on_disk["files"] == [f"CC-MAIN-SAMPLE-{i:05d}.warc.gz" for i in range(3)]
    for name in on_disk["files"]:
        assert (crawl["out"] / name).is_file()


def test_label_counts_match_summary(crawl: dict[str, Any]) -> None:
    labels, summary = crawl["labels"], crawl["summary"]
    by_reason = Counter(lab["expected_ingest"] for lab in labels)
    assert {k: v for k, v in summary["expected_ingest"].items() if v} == dict(by_reason)
    assert set(summary["expected_ingest"]) == {KEPT, *INGEST_REASONS}
    assert summary["kinds"] == dict(Counter(lab["kind"] for lab in labels))
    responses = [lab for lab in labels if lab["record_id"] is not None]
    assert summary["responses"] == len(responses) == summary["records_by_type"]["response"]
    by_type = summary["records_by_type"]
    assert by_type["warcinfo"] == 3
    # One request per fetched page, the lost page included; no metadata after the truncation.
    second = crawl["summary"]["files"][1]
    lost = sum(1 for lab in _labels_of(crawl, second) if lab["kind"] == "corrupt")
    assert by_type["request"] == by_type["response"] + lost
    assert by_type["metadata"] == by_type["request"] - 1


def test_default_counts_per_file(crawl: dict[str, Any]) -> None:
    names = crawl["summary"]["files"]
    expected = {
        names[0]: {KEPT: 36 + 2 + 4 + 3 + 2 + 2 + 2, "http_status": 2, "not_html": 3,
                   "bad_http": 1, "too_large": 1, "undecodable": 1, "empty_text": 1,
                   CORRUPT_RECORD: 1},
        names[1]: {KEPT: 59 - 6, "http_status": 2, "not_html": 1, "bad_http": 1,
                   "undecodable": 1, "empty_text": 1, CORRUPT_RECORD: 1},
        names[2]: {KEPT: 60 - 7, "http_status": 2, "not_html": 1, "bad_http": 1,
                   "undecodable": 1, "empty_text": 1, TRUNCATED_RECORD: 1},
    }
    for name, counts in expected.items():
        labels = _labels_of(crawl, name)
        assert dict(Counter(lab["expected_ingest"] for lab in labels)) == counts, name
        kinds = Counter(lab["kind"] for lab in labels)
        assert kinds["exact_duplicate"] == 2
        assert kinds["near_duplicate"] == 4
        assert kinds["pii"] == 3
        assert kinds["spam"] == 2
        assert kinds["low_quality"] == 2
        assert kinds["blocked_url"] == kinds["mojibake"] == kinds["garbled"] == 1
        assert kinds["http_404"] == kinds["http_redirect"] == 1
    first = Counter(lab["kind"] for lab in _labels_of(crawl, names[0]))
    assert first["legacy_charset"] == 2
    assert first["image_jpeg"] == first["pdf"] == first["text_plain"] == 1


def test_labels_are_consistent(crawl: dict[str, Any]) -> None:
    keys = None
    urls = []
    for lab in crawl["labels"]:
        keys = keys or set(lab)
        assert set(lab) == keys
        if lab["kind"] == "corrupt":
            assert lab["record_id"] is None and lab["doc_id"] is None
            assert lab["expected_ingest"] == CORRUPT_RECORD
            assert isinstance(lab["offset"], int)
            continue
        assert lab["doc_id"] == doc_id_from_record_id(lab["record_id"])
        assert re.fullmatch(r"<urn:uuid:[0-9a-f-]{36}>", lab["record_id"])
        assert lab["url"].startswith(f"https://{lab['host']}/")
        kept = lab["kind"] in {"article", "exact_duplicate", "near_duplicate", "pii", "spam",
                               "low_quality", "legacy_charset", "blocked_url", "mojibake",
                               "garbled"}
        assert (lab["expected_ingest"] == KEPT) == kept
        if kept:
            assert lab["lang"] in {"en", "de", "fr", "es", "ru", "zh"}
        urls.append(lab["url"])
    assert len(urls) == len(set(urls))
    doc_ids = [lab["doc_id"] for lab in crawl["labels"] if lab["doc_id"]]
    assert len(doc_ids) == len(set(doc_ids))


def test_filter_expectations_follow_the_kinds(crawl: dict[str, Any]) -> None:
    for lab in crawl["labels"]:
        expected = lab["expected_filter"]
        if lab["expected_ingest"] != KEPT:
            assert expected is None
        elif lab["lang"] != "en":
            assert expected == "langid:lang_not_target"
        else:
            assert expected == {
                "blocked_url": "urlfilter:blocked_domain",
                "garbled": "quality:unrepairable_text",
                "spam": "dropped",
                "low_quality": "dropped",
            }.get(lab["kind"], "kept")


def test_repair_pages_are_broken_the_documented_way(crawl: dict[str, Any]) -> None:
    import ftfy

    by_id = {lab["record_id"]: lab for lab in crawl["labels"] if lab["kind"] in
             ("mojibake", "garbled")}
    seen = Counter()
    # fastwarc stops at the planted damage of the first two files; the last file is whole.
    for path in sorted(crawl["out"].glob("*.warc.gz")):
        for rec in _read_fastwarc(path)[0]:
            lab = by_id.get(rec["record_id"])
            if lab is None or rec["type"] != "response":
                continue
            seen[lab["kind"]] += 1
            html = rec["body"].decode("utf-8")
            if lab["kind"] == "mojibake":
                assert "cafÃ©" in html and "café" in ftfy.fix_text(html)
            else:
                assert "caf\ufffd" in html and "é" not in html
    assert len(by_id) == 6 and seen["mojibake"] >= 1 and seen["garbled"] >= 1


def test_mostly_english_articles(crawl: dict[str, Any]) -> None:
    langs = Counter(lab["lang"] for lab in crawl["labels"] if lab["kind"] == "article")
    assert set(langs) == {"en", "de", "fr", "es", "ru", "zh"}
    assert 0.5 <= langs["en"] / sum(langs.values()) <= 0.8


# ------------------------------------------------------------------------- reading the WARCs


def _check_cc_order(types: list[str]) -> None:
    assert types[0] == "warcinfo"
    assert "warcinfo" not in types[1:]
    for i, t in enumerate(types[1:]):
        assert t == ("request", "response", "metadata")[i % 3], (i, types[i - 2 : i + 3])


@pytest.mark.parametrize("index", [0, 1, 2])
def test_fastwarc_reads_records_before_damage(crawl: dict[str, Any], index: int) -> None:
    name = crawl["summary"]["files"][index]
    labels = _labels_of(crawl, name)
    damage = _damage_offset(labels)
    assert damage is not None
    records, _ = _read_fastwarc(crawl["out"] / name)
    before = [r for r in records if r["offset"] < damage]
    assert before, "nothing readable before the damage"
    _check_cc_order([r["type"] for r in before])
    read_ids = [r["record_id"] for r in before if r["type"] == "response"]
    labelled = [
        lab["record_id"] for lab in labels if lab["record_id"] and lab["offset"] < damage
    ]
    assert read_ids == labelled
    # Every record up to the damage is complete: its block digest verifies.
    verified = []
    with open(crawl["out"] / name, "rb") as f:
        try:
            for rec in ArchiveIterator(f, parse_http=False):
                if rec.stream_pos >= damage:
                    break
                if "WARC-Block-Digest" in rec.headers:
                    verified.append(rec.verify_block_digest(consume=False))
        except OSError:
            pass  # reached the damage
    assert verified == [True] * (len(before) - 1)  # all but the warcinfo carry a digest


def test_last_file_responses_match_labels(crawl: dict[str, Any]) -> None:
    name = crawl["summary"]["files"][-1]
    path = crawl["out"] / name
    labels = _labels_of(crawl, name)
    records, _ = _read_fastwarc(path)
    responses = [r for r in records if r["type"] == "response"]
    assert len(responses) == len([lab for lab in labels if lab["record_id"]])
    assert [r["record_id"] for r in responses] == [lab["record_id"] for lab in labels]
    # The truncated response is the very last thing in the file: its member never ends.
    truncated = labels[-1]
    assert truncated["expected_ingest"] == TRUNCATED_RECORD
    assert records[-1]["record_id"] == truncated["record_id"]
    data = path.read_bytes()
    inflater = zlib.decompressobj(wbits=31)
    partial = inflater.decompress(data[truncated["offset"] :])
    assert not inflater.eof
    declared = int(re.search(rb"\r\nContent-Length: (\d+)\r\n", partial).group(1))
    block = partial.split(b"\r\n\r\n", 1)[1]
    assert 0 < len(block) < declared


@pytest.mark.parametrize("index", [0, 1, 2])
def test_warcio_agrees_with_fastwarc(crawl: dict[str, Any], index: int) -> None:
    name = crawl["summary"]["files"][index]
    damage = _damage_offset(_labels_of(crawl, name))
    fast, _ = _read_fastwarc(crawl["out"] / name)
    slow, _ = _read_warcio(crawl["out"] / name)

    def view(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["offset"], r["type"], r["record_id"], r["uri"]) for r in records
                if r["offset"] < damage]

    assert view(fast) == view(slow)
    assert len(view(fast)) > 10
    bodies_fast = [r["body"] for r in fast if r["type"] == "response" and r["offset"] < damage]
    bodies_slow = [r["body"] for r in slow if r["type"] == "response" and r["offset"] < damage]
    assert bodies_fast == bodies_slow


def test_garbage_region_is_not_a_gzip_member(crawl: dict[str, Any]) -> None:
    name = crawl["summary"]["files"][0]
    damage = _damage_offset(_labels_of(crawl, name))
    data = (crawl["out"] / name).read_bytes()
    assert data[damage : damage + 2] != b"\x1f\x8b"
    # The garbage sits between complete records: a member starts right before it ends.
    nxt = data.find(b"\x1f\x8b\x08", damage)
    assert 150 <= nxt - damage <= 260


# ------------------------------------------------------------------------- planted content


def _article_paragraphs(body: str) -> list[str]:
    article = body.split("<article>", 1)[1].split("</article>", 1)[0]
    return [html.unescape(p) for p in re.findall(r"<p>(.*?)</p>", article)]


def test_article_pages_have_boilerplate_and_prose(crawl: dict[str, Any]) -> None:
    out = crawl["out"]
    navs: dict[str, set[str]] = {}
    for lab in crawl["labels"]:
        if lab["kind"] != "article":
            continue
        body = _body(out, lab).decode("utf-8")
        for tag in ("<header>", "<nav>", "<main>", "<article>", "<h1>", "<footer>",
                    'class="cookie-banner"', 'class="copyright"'):
            assert tag in body
        navs.setdefault(lab["host"], set()).add(body.split("<nav>")[1].split("</nav>")[0])
        paragraphs = _article_paragraphs(body)
        assert 5 <= len(paragraphs) <= 12
        if lab["lang"] == "en":
            for para in paragraphs:
                sentences = re.split(r"(?<=[.!])\s+", para)
                assert 3 <= len(sentences) <= 6
                for sentence in sentences:
                    assert sentence[-1] in ".!"
                    assert 8 <= len(sentence.split()) <= 20, sentence
    # The same navigation on every page of a host: boilerplate for the extractor to drop.
    assert all(len(v) == 1 for v in navs.values())
    assert len(navs) >= 10


def test_independent_articles_barely_overlap(crawl: dict[str, Any]) -> None:
    texts = [
        lab["article_text"]
        for lab in crawl["labels"]
        if lab["kind"] == "article" and lab["article_text"]
    ]
    assert len(texts) == 12
    shingles = [word_shingles(t) for t in texts]
    for i in range(len(shingles)):
        for j in range(i + 1, len(shingles)):
            assert jaccard(shingles[i], shingles[j]) < 0.02


def test_near_duplicates(crawl: dict[str, Any]) -> None:
    by_doc = {lab["doc_id"]: lab for lab in crawl["labels"] if lab["doc_id"]}
    out = crawl["out"]
    for name in crawl["summary"]["files"]:
        near = [lab for lab in _labels_of(crawl, name) if lab["kind"] == "near_duplicate"]
        assert [lab["jaccard_target"] for lab in near] == list(NEAR_DUPLICATE_TARGETS)
        for lab in near:
            original = by_doc[lab["duplicate_of"]]
            assert original["kind"] == "article"
            assert original["article_text"] and lab["article_text"]
            score = jaccard(word_shingles(original["article_text"]),
                            word_shingles(lab["article_text"]))
            assert score == pytest.approx(lab["jaccard"], abs=1e-6)
            assert abs(score - lab["jaccard_target"]) <= 0.1
            # The recorded texts are the ones in the records.
            for label in (lab, original):
                paragraphs = _article_paragraphs(_body(out, label).decode("utf-8"))
                assert "\n".join(paragraphs) == label["article_text"]


def test_exact_duplicates(crawl: dict[str, Any]) -> None:
    out = crawl["out"]
    by_doc = {lab["doc_id"]: lab for lab in crawl["labels"] if lab["doc_id"]}
    exact = [lab for lab in crawl["labels"] if lab["kind"] == "exact_duplicate"]
    assert len(exact) == 6
    cross_file = 0
    for lab in exact:
        original = by_doc[lab["duplicate_of"]]
        assert original["kind"] == "article"
        assert original["url"] != lab["url"]
        assert _body(out, original) == _body(out, lab)
        cross_file += original["file"] != lab["file"]
    assert cross_file >= 2


def test_pii_values(crawl: dict[str, Any]) -> None:
    out = crawl["out"]
    pii_pages = [lab for lab in crawl["labels"] if lab["kind"] == "pii"]
    assert len(pii_pages) == 9
    for lab in pii_pages:
        assert lab["lang"] == "en" and lab["expected_ingest"] == KEPT
        body = _body(out, lab)
        types = [item["type"] for item in lab["pii"]]
        assert sorted(types) == sorted(["EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD",
                                        "IP_ADDRESS", "IBAN_CODE", "US_SSN", "PERSON"])
        for item in lab["pii"]:
            value = item["value"]
            assert value.encode("utf-8") in body, value
            if item["type"] == "CREDIT_CARD":
                assert re.fullmatch(r"\d{4}([ -])\d{4}\1\d{4}\1\d{4}", value)
                assert _luhn(value)
            elif item["type"] == "IBAN_CODE":
                assert value.startswith("DE") and len(value.replace(" ", "")) == 22
                assert _iban_ok(value)
            elif item["type"] == "US_SSN":
                area, group, serial = (int(x) for x in value.split("-"))
                assert 1 <= area <= 899 and area != 666 and group > 0 and serial > 0
            elif item["type"] == "PHONE_NUMBER":
                assert re.fullmatch(r"\(\d{3}\) 555-01\d\d|\+1 \d{3}-555-01\d\d", value)
            elif item["type"] == "IP_ADDRESS":
                assert all(0 <= int(x) <= 255 for x in value.split("."))
            elif item["type"] == "EMAIL_ADDRESS":
                assert re.fullmatch(r"[a-z]+\.[a-z]+@[a-z.-]+\.[a-z]+", value)
            elif item["type"] == "PERSON":
                assert f"said {value}, the spokesperson.".encode() in body


def test_legacy_charsets(crawl: dict[str, Any]) -> None:
    out = crawl["out"]
    legacy = {lab["charset"]: lab for lab in crawl["labels"] if lab["kind"] == "legacy_charset"}
    assert set(legacy) == {"iso-8859-1", "windows-1251"}
    for charset, lab in legacy.items():
        rec = _response_at(out, lab)
        declared = rec["headers"].get("Content-Type")
        body = rec["body"]
        assert lab["probe"] in body.decode(charset)
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        if charset == "iso-8859-1":
            assert declared == "text/html; charset=iso-8859-1"
            assert b"<meta charset" not in body
        else:
            assert declared == "text/html"
            assert b'<meta charset="windows-1251">' in body


def test_dropped_records(crawl: dict[str, Any]) -> None:
    out = crawl["out"]
    for lab in crawl["labels"]:
        kind = lab["kind"]
        if lab["expected_ingest"] == KEPT or kind in ("corrupt", "truncated", "bad_http"):
            continue
        rec = _response_at(out, lab)
        body, headers, status = rec["body"], rec["headers"], rec["status"]
        content_type = headers.get("Content-Type", "")
        if kind == "too_large":
            assert len(body) > HUGE_BYTES
            assert content_type.startswith("text/html")
        elif kind == "image_jpeg":
            assert body.startswith(b"\xff\xd8\xff") and content_type == "image/jpeg"
        elif kind == "image_png":
            assert body.startswith(b"\x89PNG\r\n\x1a\n") and content_type == "image/png"
        elif kind == "pdf":
            assert body.startswith(b"%PDF-1.4") and content_type == "application/pdf"
        elif kind == "text_plain":
            assert content_type.startswith("text/plain")
        elif kind == "http_404":
            assert status == 404
        elif kind == "http_redirect":
            assert status == 301
            assert headers.get("Location", "").startswith("https://")
        elif kind == "undecodable":
            assert content_type == "text/html; charset=utf-8"
            with pytest.raises(UnicodeDecodeError):
                body.decode("utf-8")
        elif kind == "empty_text":
            assert b"<body></body>" in body and b"<script>" in body and b"<style>" in body
        else:
            raise AssertionError(f"unexpected kind {kind}")
        if status == 200:
            assert int(headers["Content-Length"]) == len(body)


def test_bad_http_block(crawl: dict[str, Any]) -> None:
    data_by_file: dict[str, bytes] = {}
    bad = [lab for lab in crawl["labels"] if lab["kind"] == "bad_http"]
    assert len(bad) == 3
    for lab in bad:
        data = data_by_file.setdefault(lab["file"], (crawl["out"] / lab["file"]).read_bytes())
        record = zlib.decompressobj(wbits=31).decompress(data[lab["offset"] :])
        head, block = record.split(b"\r\n\r\n", 1)
        assert b"Content-Type: application/http; msgtype=response" in head
        assert block.startswith(b"HTP/1.1 two-hundred OK\r\n")
        assert b"\r\nContent-Type text/html\r\n" in block


# ------------------------------------------------------------------------- shingle functions


def test_normalise_for_shingles() -> None:
    assert normalise_for_shingles("Grüße aus Köln, 2024!") == "gruße aus koln 0000"
    assert normalise_for_shingles("  Hello,\n\tWORLD -- é  ") == "hello world e"
    assert normalise_for_shingles("Привет, мир 42") == "привет мир 00"


def test_word_shingles_and_jaccard() -> None:
    text = "one two three four five six"
    assert word_shingles(text) == {"one two three four five", "two three four five six"}
    assert word_shingles("Just three words") == {"just three words"}
    assert word_shingles("...") == set()
    a, b = word_shingles(text), word_shingles("one two three four five seven")
    assert jaccard(a, b) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 1.0
    assert jaccard(a, set()) == 0.0


# ------------------------------------------------------------------------- command line


def test_cli(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, "-m", "tokenmill.jobs.sample_crawl", "--out", str(out), "--files", "2"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote 2 files to ")
    assert "kept" in result.stdout and "corrupt_record=1" in result.stdout
    summary = json.loads((out / "labels-summary.json").read_text("utf-8"))
    assert summary["files"] == ["CC-MAIN-SAMPLE-00000.warc.gz", "CC-MAIN-SAMPLE-00001.warc.gz"]
    assert f"{summary['responses']} responses" in result.stdout

"""PII masking (udfs/pii.py) against the sample crawl's planted PII, ordinary numbers that must
survive, and the prefilter's promise: masking with it equals masking without it."""

from __future__ import annotations

import json
import logging
import pickle
import socket

import pytest

from tokenmill.udfs import pii
from tokenmill.udfs.pii import (
    DEFAULT_REPLACEMENTS,
    ENTITY_TYPES,
    PiiParams,
    mask_pii,
    mask_text,
    may_contain_pii,
)
from tokenmill.udfs.warc import WarcReadOptions, read_warc_file

PATTERN_TYPES = tuple(t for t in ENTITY_TYPES if t != "PERSON")
NER = PiiParams(mode="ner")
PATTERNS = PiiParams(mode="patterns")


@pytest.fixture(scope="module")
def crawl(sample_crawl):
    """(doc_id → text for every document ingest keeps, all languages; the labels)."""
    out, summary = sample_crawl
    texts: dict[str, str] = {}
    for name in summary["files"]:
        path = out / name

        def open_at(offset: int, path=path):
            f = open(path, "rb")  # read_warc_file closes it
            f.seek(offset)
            return f

        for row in read_warc_file(str(path), open_at, WarcReadOptions(), path.stat().st_size):
            if row["kind"] == "doc":
                texts[row["doc_id"]] = row["text"]
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    return texts, labels


@pytest.fixture(scope="module")
def ner_masks(crawl):
    """NER mode over every document, with and without the prefilter: the expensive part of
    this module (~40 s), computed once. The spaCy model loads once per process."""
    texts, _ = crawl
    ids = list(texts)
    docs = [texts[i] for i in ids]
    with_prefilter = mask_pii(docs, NER, prefilter=True)
    without = mask_pii(docs, NER, prefilter=False)
    return ids, docs, with_prefilter, without


def _pii_pages(crawl):
    texts, labels = crawl
    pages = [(texts[lab["doc_id"]], lab["pii"]) for lab in labels if lab["kind"] == "pii"]
    assert len(pages) == 9  # three per file
    return pages


def _assert_masked(masked: str, counts: dict[str, int], planted: list[dict], types) -> None:
    for item in planted:
        if item["type"] not in types:
            continue
        assert item["value"] not in masked, f"{item['type']} left unmasked"
        assert DEFAULT_REPLACEMENTS[item["type"]] in masked
    # The article text around the planted sentences holds nothing else to mask.
    assert counts == {t: 1 for t in types}


def test_ner_mode_masks_every_planted_value(crawl, ner_masks):
    ids, _, with_prefilter, _ = ner_masks
    by_id = dict(zip(ids, with_prefilter, strict=True))
    texts, labels = crawl
    for lab in labels:
        if lab["kind"] == "pii":
            masked, counts = by_id[lab["doc_id"]]
            _assert_masked(masked, counts, lab["pii"], ENTITY_TYPES)


def test_pattern_mode_masks_all_but_person(crawl):
    pages = _pii_pages(crawl)
    results = mask_pii([text for text, _ in pages], PATTERNS)
    for (_, planted), (masked, counts) in zip(pages, results, strict=True):
        _assert_masked(masked, counts, planted, PATTERN_TYPES)
        person = next(p["value"] for p in planted if p["type"] == "PERSON")
        assert person in masked
        assert "<PERSON>" not in masked


def test_prefilter_is_equivalent_in_both_modes(crawl, ner_masks):
    _, docs, with_prefilter, without = ner_masks
    assert len(docs) > 100
    assert with_prefilter == without
    assert mask_pii(docs, PATTERNS, prefilter=True) == mask_pii(docs, PATTERNS, prefilter=False)
    # In pattern mode the prefilter sends only the planted-PII pages to Presidio.
    passed = [d for d in docs if may_contain_pii(d, PATTERNS)]
    assert len(passed) == 9


# Realistic numbers in prose that must never be masked; Presidio's raw phone recognizer takes
# "1644", "4829301756" and "0-306-40615-2" as possible phone numbers.
ORDINARY = [
    "The bridge opened in 1998 and was repaired in 2011.",
    "The laptop costs $1,299.00 and the bag costs $49.99.",
    "See page 214 of the report, and pages 12-19.",
    "Call 3 times before giving up.",
    "The ISBN of the book is 978-0-306-40615-7, the old one 0-306-40615-2.",
    "Install spaCy 3.8.0 or version 2.10.4 of the tool.",
    "The meeting is on 2024-05-01 at 10:30, or on 05/01/2024.",
    "Your order number is 4829301756 and it ships tomorrow.",
    "The population grew to 8,336,817 people in 2020, or 8336817 by another count.",
    "Tracking number 1Z999AA10123456784 is in transit.",
    "The distance is 384,400 km and the speed of light 299 792 458 m/s.",
    "Room 1644, building 7, phone extension 2231.",
    "The number 1644 appears twice.",
    "The score was 3-1 and attendance 45,217.",
    "The ZIP code is 94103-1234 and the file is 20240501_report.pdf.",
    "Figure 3.2.1 shows coordinates 47.6062, -122.3321.",
    "Revenue was $4.5 billion, up 12.5% from 2023.",
    "The serial number is 123456789 on the box.",
    "Patent US 9,876,543 B2 was granted in 2018.",
    "Proc. Natl. Acad. Sci. 117(12), 6370-6379 (2020).",
    "Between 1914-1918 and 1939-1945 the town lost 1,204 residents.",
    "Case No. 2:19-cv-01234 was dismissed.",
    "The 2023-24 season ended 102-98 in overtime.",
    "The timestamp 2024-05-01 12:30:45 appears in the log.",
]


@pytest.mark.parametrize("mode", ["patterns", "ner"])
def test_ordinary_numbers_are_not_masked(mode):
    # PERSON is left out: this is about numbers, and NER's view of "Natl. Acad." is not.
    params = PiiParams(mode=mode, entities=PATTERN_TYPES)
    for text, (masked, counts) in zip(ORDINARY, mask_pii(ORDINARY, params), strict=True):
        assert (masked, counts) == (text, {}), text


def test_counts_and_masks_on_inline_text():
    text = (
        "Write to ana@example.com or to ben@example.org, call +1 415-555-0123 or "
        "(212) 555-0199, pay with 4111 1111 1111 1111 from 10.0.0.12 "
        "(IBAN DE89 3704 0044 0532 0130 00), SSN 219-09-9999."
    )
    masked, counts = mask_text(text, PATTERNS)
    assert masked == (
        "Write to <EMAIL> or to <EMAIL>, call <PHONE> or <PHONE>, pay with <CREDIT_CARD> "
        "from <IP> (IBAN <IBAN>), SSN <SSN>."
    )
    assert counts == {
        "EMAIL_ADDRESS": 2,
        "PHONE_NUMBER": 2,
        "CREDIT_CARD": 1,
        "IP_ADDRESS": 1,
        "IBAN_CODE": 1,
        "US_SSN": 1,
    }
    # Only the enabled types are touched.
    masked, counts = mask_text(text, PiiParams(mode="patterns", entities=("EMAIL_ADDRESS",)))
    assert counts == {"EMAIL_ADDRESS": 2}
    assert "+1 415-555-0123" in masked


def test_replacements_are_configurable_per_type():
    params = PiiParams(mode="patterns", replacements={"EMAIL_ADDRESS": "[email]"})
    masked, _ = mask_text("Mail ana@example.com or call +1 415-555-0123.", params)
    assert masked == "Mail [email] or call <PHONE>."
    assert params.replacements["PHONE_NUMBER"] == "<PHONE>"
    with pytest.raises(ValueError, match="unknown"):
        PiiParams(replacements={"EMAIL": "x"})


def test_params_validation():
    with pytest.raises(ValueError):
        PiiParams(mode="regex")
    with pytest.raises(ValueError):
        PiiParams(language="de")
    with pytest.raises(ValueError):
        PiiParams(entities=("PASSPORT",))
    with pytest.raises(ValueError):
        PiiParams(score_threshold=1.5)
    assert "PERSON" not in PiiParams(mode="patterns").active_entities()
    assert PiiParams().threshold("PHONE_NUMBER") == 0.4
    assert PiiParams().threshold("US_SSN") == 0.5
    assert PiiParams(type_thresholds={"US_SSN": 0.6}).threshold("PHONE_NUMBER") == 0.4
    assert hash(PiiParams()) == hash(PiiParams())
    # Shipped to Spark executors by pickle.
    assert pickle.loads(pickle.dumps(PiiParams(mode="patterns"))) == PiiParams(mode="patterns")


def test_overlaps_prefer_the_specific_type(monkeypatch):
    # "number" lifts the phone reading of an SSN to 0.75, above the SSN's 0.5; the SSN wins.
    masked, counts = mask_text("The form showed the number 861-74-2234 twice.", NER)
    assert (masked, counts) == ("The form showed the number <SSN> twice.", {"US_SSN": 1})
    # A dotted quad is also a possible phone number.
    masked, counts = mask_text("The server 169.62.207.85 logged it.", PATTERNS)
    assert counts == {"IP_ADDRESS": 1}


def test_prefilter_sees_every_form_the_analyzer_finds():
    found = [
        "mail x.y+z@sub.example.co.uk now",
        "addr fe80::1ff:fe23:4567:890a here",
        "addr 2001:0DB8:85A3:0000:0000:8A2E:0370:7334 here",
        "addr ::ffff:192.0.2.128 here",
        "card 4111-1111-1111-1111 here",
        "ssn 219.09.9999 here",
        "tel +44\u00a020\u00a07946\u00a00958 here",
        "tel 415\u2013555\u20130123 here",
        "iban GB82 WEST 1234 5698 7654 32 here",
        "iban GB82WEST12345698765432 here",
    ]
    for text in found:
        _, counts = mask_text(text, PATTERNS, prefilter=False)
        assert counts, text
        assert may_contain_pii(text, PATTERNS), text
    nothing = ["No digits at all here.", "It cost 12.99 in 2024.", "Version 3.8.0 is out."]
    assert not any(may_contain_pii(t, PATTERNS) for t in nothing)
    assert not may_contain_pii("", NER)
    assert not may_contain_pii("全部是中文，没有大写字母。", NER)


def test_person_spans_must_look_like_names():
    shaped = ["Elena Keller", "Keller", "Ludwig van Beethoven", "de Gaulle", "KELLER", "Zoë"]
    junk = ["muddy boathouse", "baker", "周末，狭窄的渔民", "esta biblioteca", "Square square", ""]
    assert all(pii._name_shaped(s) for s in shaped)
    assert not any(pii._name_shaped(s) for s in junk)


def test_long_texts_are_chunked_at_paragraphs(monkeypatch):
    paragraph = "Plain words about the harbour and the market. " * 3
    text = "\n\n".join(
        f"{paragraph}Write to user{i}@example.com today." for i in range(40)
    )
    pieces = list(pii._chunks(text, 300))
    assert "".join(p for _, p in pieces) == text
    assert all(len(p) <= 300 for _, p in pieces)
    assert all(text[o : o + len(p)] == p for o, p in pieces)
    assert all(p.endswith("\n\n") for _, p in pieces[:-1])
    whole = mask_text(text, PATTERNS)
    monkeypatch.setattr(pii, "CHUNK_CHARS", 300)
    chunked = mask_text(text, PATTERNS)
    assert chunked == whole
    assert chunked[1] == {"EMAIL_ADDRESS": 40}
    # A window without any whitespace is cut hard.
    assert [len(p) for _, p in pii._chunks("x" * 650, 300)] == [300, 300, 50]


def test_no_network_access(monkeypatch):
    attempts: list[tuple] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted in test")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    # Fresh analyzers and a fresh suffix-list extractor, so loading is exercised too; the
    # process-wide ones come back after the test.
    monkeypatch.setattr(pii, "_analyzers", {})
    monkeypatch.setattr(pii, "_tld_extractor", None)
    text = "Mail ana@letterbox-mail.com, Elena Keller said, from 10.1.2.3."
    masked, counts = mask_text(text, NER)
    assert masked == "Mail <EMAIL>, <PERSON> said, from <IP>."
    assert counts == {"EMAIL_ADDRESS": 1, "PERSON": 1, "IP_ADDRESS": 1}
    assert mask_text(text, PATTERNS)[1] == {"EMAIL_ADDRESS": 1, "IP_ADDRESS": 1}
    assert attempts == []


def test_no_pii_in_logs(caplog):
    caplog.set_level(logging.DEBUG)
    text = (
        "Mail ana@example.com or call +1 415-555-0123; Elena Keller; "
        "DE89 3704 0044 0532 0130 00."
    )
    masked, _ = mask_text(text, NER)
    assert "ana@example.com" not in masked
    for value in ("ana@example.com", "415-555-0123", "Keller", "3704", "Mail"):
        assert value not in caplog.text

"""HTML bytes → (charset, text). Pure functions, no Spark."""

from __future__ import annotations

import re

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import bytes_to_str, detect_encoding, map_encoding_to_html5
from resiliparse.parse.html import HTMLTree

# <meta charset="x"> or <meta http-equiv="Content-Type" content="text/html; charset=x">; the
# HTML standard only looks at the first 1024 bytes, we allow a little more for sloppy pages.
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_SNIFF_LIMIT = 4096


def meta_charset(html: bytes) -> str | None:
    m = _META_CHARSET.search(html[:_SNIFF_LIMIT])
    return m.group(1).decode("ascii", "replace").lower() if m else None


def choose_charset(http_charset: str | None, html: bytes) -> str:
    """The HTTP header's charset, else the page's meta charset, else uchardet's guess —
    each mapped to the HTML5 name browsers use (iso-8859-1 is decoded as windows-1252)."""
    for declared in (http_charset, meta_charset(html)):
        if declared:
            mapped = map_encoding_to_html5(declared)
            if mapped:
                return mapped
    return map_encoding_to_html5(detect_encoding(html)) or "utf-8"


def decode_html(html: bytes, http_charset: str | None) -> tuple[str, str]:
    charset = choose_charset(http_charset, html)
    return charset, bytes_to_str(html, charset, errors="replace")


_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def bad_char_fraction(text: str) -> float:
    """Share of U+FFFD and C0/C1 control characters (tab, newline, CR excepted): high for
    binary data served as text/html or text decoded with the wrong charset."""
    if not text:
        return 0.0
    return (len(text) - len(_BAD_CHARS.sub("", text))) / len(text)


def extract_text(html: str, extractor: str = "resiliparse", main_content: bool = True) -> str:
    """Visible text with paragraphs kept as lines (the quality rules work on lines)."""
    if extractor == "trafilatura":
        import trafilatura  # imported lazily: slow to import, optional in practice

        text = trafilatura.extract(html, include_comments=False, favor_recall=not main_content)
        return (text or "").strip()
    tree = HTMLTree.parse(html)
    return extract_plain_text(
        tree, preserve_formatting=True, main_content=main_content, list_bullets=True
    ).strip()

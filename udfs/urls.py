"""URL parts. The public-suffix list is the snapshot bundled with tldextract, never fetched."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

import tldextract


@lru_cache(maxsize=1)
def _extractor() -> tldextract.TLDExtract:
    # suffix_list_urls=() keeps tldextract offline; cache_dir=None avoids writing to $HOME
    # on executors.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def host_and_domain(url: str | None) -> tuple[str | None, str | None]:
    """(host, registered domain): `news.example.co.uk` → (`news.example.co.uk`,
    `example.co.uk`). IP addresses are their own domain; garbage gives (None, None)."""
    if not url:
        return None, None
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None, None
    if not host:
        return None, None
    host = host.rstrip(".").lower()
    parts = _extractor()(host)
    domain = parts.top_domain_under_public_suffix or parts.domain or host
    return host, domain

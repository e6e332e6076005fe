"""URL blocklist filter in the C4 / RefinedWeb / FineWeb style.

A URL is blocked by, in this order: its registered domain, its host or a parent of it being in
`domains` ("domain"), its host or a parent of it being in `hosts` ("host"), the normalised URL
being in `urls` ("url"), one of its words being a banned word ("word"), or a banned fragment
appearing anywhere in it ("subword"). Soft-banned words are only counted; the job decides how
many are too many. `domains` holds registered domains (`example.com`) and `hosts` hostnames
(`ads.example.org`); both block the listed name and everything under it, never its parent.

The project ships small placeholder lists in `udfs/lists/`; production lists (e.g. the UT1
blacklists) are passed by path.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenmill.udfs.text import read_list_file
from tokenmill.udfs.urls import host_and_domain

LISTS_DIR = Path(__file__).parent / "lists"
DEFAULT_DOMAINS_FILE = LISTS_DIR / "url_banned_domains.txt"
DEFAULT_BANNED_WORDS_FILE = LISTS_DIR / "url_banned_words.txt"
DEFAULT_BANNED_SUBWORDS_FILE = LISTS_DIR / "url_banned_subwords.txt"
DEFAULT_SOFT_WORDS_FILE = LISTS_DIR / "url_soft_words.txt"

# "Non-alphanumeric" is Unicode-aware: letters of any script stay inside words.
_URL_WORD_SPLIT = re.compile(r"[\W_]+")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*://")

PathArg = str | os.PathLike[str]
BlockResult = tuple[str | None, str | None, int]


def url_words(url: str) -> list[str]:
    """Lowercased URL split on every non-alphanumeric character, empty pieces dropped:
    `https://www.xxx-videos.example/path?q=1` → https, www, xxx, videos, example, path, q, 1."""
    return [w for w in _URL_WORD_SPLIT.split(url.lower()) if w]


def normalise_url(url: str) -> str:
    """The form both list entries and checked URLs take before exact comparison: lowercased,
    scheme (or a protocol-relative `//`), a leading `www.`, the fragment and trailing slashes
    removed. `HTTPS://WWW.Example.com/a/#top` → `example.com/a`.

    The whole URL is lowercased, not just scheme and host, because UT1 and plain list entries
    are lowercased on load; matching is therefore case-insensitive in the path too.
    """
    s = url.strip().lower()
    s = s.split("#", 1)[0]
    s = _SCHEME.sub("", s, count=1)
    if s.startswith("//"):
        s = s[2:]
    if s.startswith("www."):
        s = s[4:]
    return s.rstrip("/")


def _host_suffixes(host: str) -> Iterable[str]:
    """`a.b.example.org` → itself, `b.example.org`, `example.org`, `org`."""
    yield host
    start = host.find(".")
    while start != -1:
        yield host[start + 1 :]
        start = host.find(".", start + 1)


@dataclass(frozen=True)
class UrlBlocklist:
    """Immutable, picklable set of URL block lists (broadcast it to executors)."""

    domains: frozenset[str] = frozenset()
    hosts: frozenset[str] = frozenset()
    urls: frozenset[str] = frozenset()
    banned_words: frozenset[str] = frozenset()
    banned_subwords: tuple[str, ...] = ()
    soft_words: frozenset[str] = frozenset()
    _subword_re: re.Pattern[str] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Accept any iterables from callers building a list by hand; the frozen fields must be
        # hashable and fingerprint() needs stable types.
        for name in ("domains", "hosts", "urls", "banned_words", "soft_words"):
            value = getattr(self, name)
            if not isinstance(value, frozenset):
                object.__setattr__(self, name, frozenset(value))
        subwords = tuple(s for s in self.banned_subwords if s)
        object.__setattr__(self, "banned_subwords", subwords)
        if subwords:
            # Longest first: at a given position the regex takes the first alternative that
            # matches, so the reported entry is the most specific one.
            ordered = sorted(set(subwords), key=lambda s: (-len(s), s))
            pattern = re.compile("|".join(re.escape(s) for s in ordered))
            object.__setattr__(self, "_subword_re", pattern)

    def check(self, url: str | None) -> BlockResult:
        """(block_kind, matched_entry, soft_word_count); block_kind is None for a clean URL.

        The soft-word count is given for blocked URLs too, so a job can report both.
        """
        if not url or not url.strip():
            return None, None, 0
        lowered = url.strip().lower()
        words = url_words(lowered)
        soft = sum(1 for w in words if w in self.soft_words) if self.soft_words else 0

        if self.domains or self.hosts:
            host, domain = host_and_domain(url)
            if domain is not None and domain in self.domains:
                return "domain", domain, soft
            if host is not None:
                # Walking the host's suffixes also catches listed domains that the public-suffix
                # list does not see as registered domains (`spam.example`, `x.onion`): for those
                # host_and_domain reports only the last label as the domain.
                for name, entries in (("domain", self.domains), ("host", self.hosts)):
                    if entries:
                        for suffix in _host_suffixes(host):
                            if suffix in entries:
                                return name, suffix, soft
        if self.urls:
            normalised = normalise_url(lowered)
            if normalised in self.urls:
                return "url", normalised, soft
        if self.banned_words:
            for word in words:
                if word in self.banned_words:
                    return "word", word, soft
        if self._subword_re is not None:
            match = self._subword_re.search(lowered)
            if match is not None:
                return "subword", match.group(), soft
        return None, None, soft

    def fingerprint(self) -> str:
        """First 16 hex chars of a sha256 over every list's sorted entries: equal fingerprints
        mean equal lists, so a job can record which lists produced its output."""
        digest = hashlib.sha256()
        parts: list[tuple[str, Iterable[str]]] = [
            ("domains", self.domains),
            ("hosts", self.hosts),
            ("urls", self.urls),
            ("banned_words", self.banned_words),
            ("banned_subwords", self.banned_subwords),
            ("soft_words", self.soft_words),
        ]
        for name, entries in parts:
            # Field name and separators keep moving an entry between lists from giving the
            # same hash.
            digest.update(name.encode("utf-8") + b"\x00")
            for entry in sorted(set(entries)):
                digest.update(entry.encode("utf-8", "surrogatepass") + b"\n")
            digest.update(b"\x01")
        return digest.hexdigest()[:16]


def _as_paths(arg: PathArg | Sequence[PathArg]) -> Sequence[PathArg]:
    # A single path string would otherwise be iterated character by character.
    if isinstance(arg, str | os.PathLike):
        return (arg,)
    return arg


def _read_entries(path: PathArg) -> list[str]:
    return read_list_file(path, "block list")


def _add_plain_domain_entry(entry: str, domains: set[str], hosts: set[str]) -> None:
    """A plain domains-file entry is a domain as written, except `*.x.org` / `.x.org`, which are
    host suffixes. (Both kinds block the name and everything under it; the kind is the label
    the check reports.)"""
    if entry.startswith(("*.", ".")):
        hosts.add(entry.removeprefix("*").strip("."))
    else:
        domains.add(entry.strip("."))


def _add_ut1_domain_entry(entry: str, domains: set[str], hosts: set[str]) -> None:
    """UT1 `domains` files mix registered domains, hostnames and IPs: an entry that is its own
    registered domain (IPs included) is a domain, any other hostname (`ads.x.org`) a host."""
    host, domain = host_and_domain("http://" + entry)
    if host is None:
        # Unparseable (port, path, stray characters): kept verbatim; it can only match an
        # identical host, never block more than it says.
        hosts.add(entry)
    elif domain == host:
        domains.add(host)
    else:
        hosts.add(host)


def load_blocklist(
    domains_files: Sequence[PathArg] = (),
    hosts_files: Sequence[PathArg] = (),
    urls_files: Sequence[PathArg] = (),
    banned_words_files: Sequence[PathArg] = (),
    banned_subwords_files: Sequence[PathArg] = (),
    soft_words_files: Sequence[PathArg] = (),
    ut1_dirs: Sequence[PathArg] = (),
    ut1_categories: Sequence[str] = ("adult",),
    include_defaults: bool = True,
) -> UrlBlocklist:
    """Builds a UrlBlocklist from plain list files, UT1 blacklist folders and (unless
    `include_defaults=False`) the project's default lists in `udfs/lists/`.

    UT1 folders are read as `<dir>/<category>/domains` and `<dir>/<category>/urls` for each of
    `ut1_categories`; a category without its folder raises ValueError, a category folder
    lacking one of the two files contributes nothing for it.
    """
    domains: set[str] = set()
    hosts: set[str] = set()
    urls: set[str] = set()
    banned_words: set[str] = set()
    subwords: set[str] = set()
    soft_words: set[str] = set()

    domains_paths = list(_as_paths(domains_files))
    banned_words_paths = list(_as_paths(banned_words_files))
    subwords_paths = list(_as_paths(banned_subwords_files))
    soft_paths = list(_as_paths(soft_words_files))
    if include_defaults:
        domains_paths.insert(0, DEFAULT_DOMAINS_FILE)
        banned_words_paths.insert(0, DEFAULT_BANNED_WORDS_FILE)
        subwords_paths.insert(0, DEFAULT_BANNED_SUBWORDS_FILE)
        soft_paths.insert(0, DEFAULT_SOFT_WORDS_FILE)
    url_paths = list(_as_paths(urls_files))
    ut1_domains_paths: list[Path] = []

    categories = [ut1_categories] if isinstance(ut1_categories, str) else list(ut1_categories)
    for ut1_dir in _as_paths(ut1_dirs):
        root = Path(ut1_dir)
        if not root.is_dir():
            raise FileNotFoundError(f"UT1 blacklist folder not found: {root}")
        for category in categories:
            folder = root / category
            if not folder.is_dir():
                raise ValueError(f"UT1 category {category!r} not found in {root}")
            if (folder / "domains").is_file():
                ut1_domains_paths.append(folder / "domains")
            if (folder / "urls").is_file():
                url_paths.append(folder / "urls")

    for path in domains_paths:
        for entry in _read_entries(path):
            _add_plain_domain_entry(entry, domains, hosts)
    for path in ut1_domains_paths:
        for entry in _read_entries(path):
            _add_ut1_domain_entry(entry, domains, hosts)
    for path in _as_paths(hosts_files):
        for entry in _read_entries(path):
            hosts.add(entry.removeprefix("*.").strip("."))
    for path in url_paths:
        for entry in _read_entries(path):
            normalised = normalise_url(entry)
            if normalised:
                urls.add(normalised)
    for path in banned_words_paths:
        banned_words.update(_read_entries(path))
    for path in subwords_paths:
        subwords.update(_read_entries(path))
    for path in soft_paths:
        soft_words.update(_read_entries(path))

    return UrlBlocklist(
        domains=frozenset(domains),
        hosts=frozenset(hosts),
        urls=frozenset(urls),
        banned_words=frozenset(banned_words),
        banned_subwords=tuple(sorted(subwords)),
        soft_words=frozenset(soft_words),
    )

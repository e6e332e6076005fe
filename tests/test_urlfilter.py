"""URL blocklist: list loading (plain files, UT1 folders), each block kind, soft words."""

from __future__ import annotations

import pickle

import pytest

from tokenmill.udfs.urlfilter import UrlBlocklist, load_blocklist, normalise_url, url_words


def write(path, *lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def lists(tmp_path):
    return {
        "domains": write(
            tmp_path / "domains.txt",
            "# a comment",
            "",
            "Bad-Domain.COM  ",
            "*.wild.example.net",
            ".dot.example.net",
            "sub.mixed.example.org",
        ),
        "hosts": write(tmp_path / "hosts.txt", "ads.example.org", "  # indented comment"),
        "urls": write(tmp_path / "urls.txt", "http://www.Example.com/Some/Page/#frag"),
        "words": write(tmp_path / "words.txt", "badword"),
        "subwords": write(tmp_path / "subwords.txt", "evilfrag", "evil"),
        "soft": write(tmp_path / "soft.txt", "casino", "poker"),
    }


@pytest.fixture
def blocklist(lists):
    return load_blocklist(
        domains_files=[lists["domains"]],
        hosts_files=[lists["hosts"]],
        urls_files=[lists["urls"]],
        banned_words_files=[lists["words"]],
        banned_subwords_files=[lists["subwords"]],
        soft_words_files=[lists["soft"]],
        include_defaults=False,
    )


def test_loading_sorts_entries(blocklist):
    # Plain domains-file entries are domains as written; `*.` and `.` make host suffixes.
    assert blocklist.domains == {"bad-domain.com", "sub.mixed.example.org"}
    assert blocklist.hosts == {"wild.example.net", "dot.example.net", "ads.example.org"}
    assert blocklist.urls == {"example.com/some/page"}
    assert blocklist.banned_words == {"badword"}
    assert set(blocklist.banned_subwords) == {"evilfrag", "evil"}
    assert blocklist.soft_words == {"casino", "poker"}


@pytest.mark.parametrize(
    ("url", "kind", "entry"),
    [
        ("https://bad-domain.com/", "domain", "bad-domain.com"),
        ("http://deep.sub.BAD-DOMAIN.com/x", "domain", "bad-domain.com"),
        ("https://ads.example.org/banner", "host", "ads.example.org"),
        ("https://x.y.ads.example.org/", "host", "ads.example.org"),
        ("https://wild.example.net/", "host", "wild.example.net"),
        ("https://a.dot.example.net/", "host", "dot.example.net"),
        ("HTTPS://example.com/some/page/", "url", "example.com/some/page"),
        ("http://www.example.com/some/page#comments", "url", "example.com/some/page"),
        ("https://shop.example/badword-sale", "word", "badword"),
        ("https://shop.example/items?tag=BADWORD", "word", "badword"),
        ("https://shop.example/superevilfragment", "subword", "evilfrag"),
        ("https://shop.example/devilish", "subword", "evil"),
    ],
)
def test_block_kinds(blocklist, url, kind, entry):
    got_kind, got_entry, _ = blocklist.check(url)
    assert (got_kind, got_entry) == (kind, entry)


def test_host_entry_does_not_block_parent_or_siblings(blocklist):
    assert blocklist.check("https://example.org/")[0] is None
    assert blocklist.check("https://news.example.org/")[0] is None
    assert blocklist.check("https://mixed.example.org/")[0] is None
    assert blocklist.check("https://x.sub.mixed.example.org/")[:2] == (
        "domain",
        "sub.mixed.example.org",
    )


def test_url_entry_is_exact(blocklist):
    assert blocklist.check("https://example.com/some/page/more")[0] is None
    assert blocklist.check("https://example.com/some")[0] is None


def test_first_match_wins_in_order(blocklist):
    # Blocked by domain although it also contains a banned word and a subword.
    assert blocklist.check("https://bad-domain.com/badword/evil")[:2] == (
        "domain",
        "bad-domain.com",
    )
    # Word is checked before subword.
    assert blocklist.check("https://shop.example/badword/evil")[:2] == ("word", "badword")


def test_clean_and_empty_urls(blocklist):
    assert blocklist.check("https://en.wikipedia.org/wiki/Bread") == (None, None, 0)
    assert blocklist.check(None) == (None, None, 0)
    assert blocklist.check("") == (None, None, 0)
    assert blocklist.check("   ") == (None, None, 0)
    assert blocklist.check("not a url at all")[0] is None


def test_soft_word_counting(blocklist):
    assert blocklist.check("https://casino-poker.example/casino/play?game=poker") == (
        None,
        None,
        4,
    )
    # "casinos" is not the word "casino".
    assert blocklist.check("https://casinos.example/") == (None, None, 0)
    # Counted for blocked URLs too.
    assert blocklist.check("https://bad-domain.com/casino") == ("domain", "bad-domain.com", 1)


def test_url_words_and_normalisation():
    assert url_words("https://www.xxx-videos.example/path?q=1") == [
        "https",
        "www",
        "xxx",
        "videos",
        "example",
        "path",
        "q",
        "1",
    ]
    assert url_words("http://a.example/snake_case") == ["http", "a", "example", "snake", "case"]
    assert normalise_url("HTTPS://WWW.Example.com/a/#top") == "example.com/a"
    assert normalise_url("example.com/a?x=1") == "example.com/a?x=1"
    assert normalise_url("//www.example.com/") == "example.com"


def test_ut1_folder(tmp_path):
    ut1 = tmp_path / "blacklists"
    write(ut1 / "adult" / "domains", "porn-site.example.com", "cams.porn-other.example.com")
    write(ut1 / "adult" / "urls", "pics.example.com/nsfw/gallery")
    write(ut1 / "gambling" / "domains", "bets.example.com")
    write(ut1 / "gambling" / "urls", "news.example.com/odds")

    bl = load_blocklist(ut1_dirs=[ut1], ut1_categories=["adult"], include_defaults=False)
    # `example.com` entries: a registered domain is a domain, a deeper hostname a host.
    assert bl.domains == set()
    assert bl.hosts == {"porn-site.example.com", "cams.porn-other.example.com"}
    assert bl.check("https://porn-site.example.com/")[:2] == ("host", "porn-site.example.com")
    assert bl.check("https://cams.porn-other.example.com/")[:2] == (
        "host",
        "cams.porn-other.example.com",
    )
    assert bl.check("https://porn-other.example.com/")[0] is None
    assert bl.check("http://pics.example.com/nsfw/gallery/")[:2] == (
        "url",
        "pics.example.com/nsfw/gallery",
    )
    # The unchosen category does not apply.
    assert bl.check("https://bets.example.com/")[0] is None
    assert bl.check("https://news.example.com/odds")[0] is None

    both = load_blocklist(
        ut1_dirs=[ut1], ut1_categories=("adult", "gambling"), include_defaults=False
    )
    assert both.check("https://bets.example.com/")[0] is not None
    assert both.check("https://news.example.com/odds")[0] == "url"

    with pytest.raises(ValueError, match="phishing"):
        load_blocklist(ut1_dirs=[ut1], ut1_categories=["phishing"], include_defaults=False)
    with pytest.raises(FileNotFoundError):
        load_blocklist(ut1_dirs=[tmp_path / "nowhere"], include_defaults=False)


def test_ut1_registered_domains_are_domains(tmp_path):
    ut1 = tmp_path / "ut1"
    write(ut1 / "adult" / "domains", "adult-site.co.uk", "sub.other-site.co.uk", "10.1.2.3")
    bl = load_blocklist(ut1_dirs=ut1, include_defaults=False)
    assert bl.domains == {"adult-site.co.uk", "10.1.2.3"}
    assert bl.hosts == {"sub.other-site.co.uk"}
    assert bl.check("https://www.adult-site.co.uk/x")[:2] == ("domain", "adult-site.co.uk")
    assert bl.check("http://10.1.2.3:8080/")[:2] == ("domain", "10.1.2.3")


def test_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_blocklist(domains_files=[missing])


def test_defaults():
    bl = load_blocklist()
    assert {"spam-deals.example", "casino-bonus.example"} <= bl.domains
    assert bl.check("https://www.spam-deals.example/offer")[:2] == ("domain", "spam-deals.example")
    assert bl.check("https://videos.example/xxx/1")[:2] == ("word", "xxx")
    assert bl.check("https://videos.example/freepornovideos")[:2] == ("subword", "porno")
    assert bl.check("https://dating.example/casino-poker")[2] == 3
    assert bl.check("https://en.wikipedia.org/wiki/Bread") == (None, None, 0)
    assert load_blocklist(include_defaults=False) == UrlBlocklist()


def test_fingerprint_tracks_contents(tmp_path, lists):
    a = load_blocklist(domains_files=[lists["domains"]], include_defaults=False)
    b = load_blocklist(domains_files=[lists["domains"]], include_defaults=False)
    assert a.fingerprint() == b.fingerprint()
    assert len(a.fingerprint()) == 16
    write(lists["domains"], "bad-domain.com", "another.example")
    c = load_blocklist(domains_files=[lists["domains"]], include_defaults=False)
    assert c.fingerprint() != a.fingerprint()
    # The same entry in a different list is a different blocklist.
    assert (
        UrlBlocklist(banned_words=frozenset({"x"})).fingerprint()
        != UrlBlocklist(soft_words=frozenset({"x"})).fingerprint()
    )


def test_pickles_for_broadcast(blocklist):
    clone = pickle.loads(pickle.dumps(blocklist))
    assert clone == blocklist
    assert clone.check("https://shop.example/devilish")[:2] == ("subword", "evil")
    assert clone.fingerprint() == blocklist.fingerprint()


def test_hand_built_blocklist_accepts_plain_sets():
    bl = UrlBlocklist(domains={"x.example"}, banned_subwords=("abc",))
    assert isinstance(bl.domains, frozenset)
    assert bl.check("https://www.x.example/")[:2] == ("domain", "x.example")
    assert bl.check("https://y.example/zabcz")[:2] == ("subword", "abc")

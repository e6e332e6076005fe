"""Quality signals and rules (Gopher, C4, FineWeb, text repair) on small inline texts: each rule
broken by a text that passes every rule before it, signal values against hand-computed numbers,
threshold changes, and the fast paths checked against the plain computations. No Spark."""

from __future__ import annotations

import random
from collections import Counter

import ftfy
import pytest
from ftfy.badness import badness

from tokenmill.udfs import quality as q
from tokenmill.udfs.quality import (
    C4_DEFAULTS,
    QUALITY_RULES,
    SIGNAL_TYPES,
    c4_clean,
    count_sentences,
    fineweb_signals,
    first_failing_rule,
    gopher_quality_signals,
    gopher_repetition_signals,
    mojibake_badness,
    normalise_text,
    quality_signals,
    thresholds_default,
)

# Distinct natural sentences with stop words: no 5-gram occurs twice across them.
SENTENCES = [
    "The morning was cold and the river carried ice down to the harbour.",
    "By noon the sun had returned and the market opened again for business.",
    "Fishermen sold their catch to families who had waited since dawn.",
    "A small bakery near the bridge offered warm bread with honey and butter.",
    "Children ran along the quay, chasing gulls that circled above the boats.",
    "In the afternoon a light wind came from the west and cleared the fog.",
    "The council met in the old library to discuss repairs to the pier.",
    "Several members argued that the budget should have been approved last spring.",
    "Others wanted to wait until the engineers finished their survey of the sea wall.",
    "After a long debate they agreed to start work before the autumn storms.",
    "Local newspapers reported the decision with cautious optimism the next day.",
    "Tourists visiting the coast often stop at the lighthouse to admire the view.",
    "Its keeper, now retired, still tells stories about ships lost in winter gales.",
    "Every evening the lamps along the promenade glow softly against the dark water.",
    "Most residents agree that the village has changed very little in fifty years.",
    "Even so, younger families keep moving inland to find work in larger towns.",
]
# Sentences without any of Gopher's eight stop words.
STOPLESS = [
    "Cats sleep on warm windowsills during sunny afternoons.",
    "Engineers tested every bridge cable before winter arrived.",
    "Farmers harvested pumpkins while geese flew south overhead.",
    "Students painted colourful murals across several school corridors.",
    "Volunteers planted young oak trees near our quiet canal.",
    "Musicians rehearsed late into Friday evening for Saturday's concert.",
    "Bakers rose early, kneading dough by lamplight each morning.",
    "Hikers followed narrow trails up steep granite ridges.",
]


def paragraph(sentences: list[str]) -> str:
    return " ".join(sentences)


def article(n_paragraphs: int = 4, per_paragraph: int = 4) -> str:
    """A clean multi-paragraph English text: one line per paragraph, blank lines between."""
    chunks = [
        paragraph(SENTENCES[i * per_paragraph : (i + 1) * per_paragraph])
        for i in range(n_paragraphs)
    ]
    return "\n\n".join(chunks)


def unique_words(n: int, length: int, prefix: str = "") -> list[str]:
    """n distinct lowercase words of exactly `length` letters (never stop words)."""
    letters = "bcdfghjklmnpqrstvwxz"
    out = []
    i = 0
    while len(out) < n:
        digits, k = [], i
        for _ in range(length - len(prefix)):
            digits.append(letters[k % len(letters)])
            k //= len(letters)
        out.append(prefix + "".join(reversed(digits)))
        i += 1
    return out


def decide(text: str, **overrides) -> str | None:
    _, signals = quality_signals(text)
    return first_failing_rule(signals, {**thresholds_default(), **overrides})


def signals_of(text: str) -> dict:
    return quality_signals(text)[1]


# --------------------------------------------------------------------------------------------
# The clean article and the empty text
# --------------------------------------------------------------------------------------------


def test_clean_article_passes_every_rule():
    text = article()
    cleaned, signals = quality_signals(text)
    assert first_failing_rule(signals, thresholds_default()) is None
    assert cleaned == text  # nothing for C4 to remove, nothing to normalise
    assert signals["words"] == len(text.split())
    assert signals["c4_sentences"] == 16
    assert signals["stop_words"] > 20


@pytest.mark.parametrize("text", ["", "   \n\n\t  \r\n "])
def test_empty_text_gives_zero_signals(text):
    cleaned, signals = quality_signals(text)
    assert cleaned == ""
    assert set(signals) == set(SIGNAL_TYPES)
    assert all(v == 0 for v in signals.values())
    assert first_failing_rule(signals, thresholds_default()) == "gopher_min_words"
    for fn in (gopher_quality_signals, gopher_repetition_signals, fineweb_signals):
        assert all(v == 0 for v in fn(text).values())
    assert c4_clean(text)[0] == ""


def test_signal_keys_and_types():
    _, signals = quality_signals(article() + "\n\nCafÃ© prices rose [1] again. 3 # …")
    assert list(signals) == list(SIGNAL_TYPES)
    for key, value in signals.items():
        assert type(value) is SIGNAL_TYPES[key], key


# --------------------------------------------------------------------------------------------
# The rule table
# --------------------------------------------------------------------------------------------


def test_rule_table_is_consistent():
    params = [r.param for r in QUALITY_RULES]
    assert len(params) == len(set(params))
    assert thresholds_default() == {r.param: r.default for r in QUALITY_RULES}
    for rule in QUALITY_RULES:
        assert rule.signal in SIGNAL_TYPES, rule
        assert rule.op in ("lt", "gt", "flag"), rule
        if rule.op == "flag":
            assert rule.default is True
        elif SIGNAL_TYPES[rule.signal] is int:
            assert type(rule.default) is int, rule
        else:
            assert type(rule.default) is float, rule
    reasons = [r.reason for r in QUALITY_RULES]
    assert reasons[:2] == ["unrepairable_text", "unrepairable_text"]
    assert reasons[2:6] == [
        "gopher_dup_line_fraction",
        "gopher_dup_para_fraction",
        "gopher_dup_line_chars",
        "gopher_dup_para_chars",
    ]
    assert reasons[-8:] == [
        "c4_empty",
        "c4_lorem_ipsum",
        "c4_curly_bracket",
        "c4_min_sentences",
        "fineweb_line_punct",
        "fineweb_short_lines",
        "fineweb_char_dup",
        "fineweb_list_ratio",
    ]
    defaults = thresholds_default()
    assert defaults["gopher_min_words"] == 50 and defaults["gopher_max_words"] == 100_000
    assert defaults["gopher_max_dup_5gram_char_fraction"] == 0.15
    assert defaults["gopher_max_top_2gram_char_fraction"] == 0.20
    assert defaults["fineweb_max_newline_ratio"] == 0.3


def test_first_failing_rule_ops_and_disabling():
    signals = dict.fromkeys(SIGNAL_TYPES, 0)
    signals.update(words=500, mean_word_length=5.0, alpha_words_ratio=1.0, stop_words=10)
    signals.update(c4_lines_kept=5, c4_sentences=10, line_punct_ratio=1.0)
    defaults = thresholds_default()
    assert first_failing_rule(signals, defaults) is None
    assert first_failing_rule({**signals, "c4_lorem_ipsum": 1}, defaults) == "c4_lorem_ipsum"
    off = {**defaults, "c4_drop_lorem_ipsum": False}
    assert first_failing_rule({**signals, "c4_lorem_ipsum": 1}, off) is None
    # "gt" is strict: a value at the threshold passes.
    assert first_failing_rule({**signals, "hash_ratio": 0.1}, defaults) is None
    assert first_failing_rule({**signals, "hash_ratio": 0.11}, defaults) == "gopher_hash_ratio"
    # A missing threshold falls back to the rule's default; None disables the rule.
    assert first_failing_rule({**signals, "words": 10}, {}) == "gopher_min_words"
    assert first_failing_rule({**signals, "words": 10}, {"gopher_min_words": None}) is None


# --------------------------------------------------------------------------------------------
# One text per rule, each passing every earlier rule
# --------------------------------------------------------------------------------------------


def test_unrepairable_mojibake():
    # Russian saved as cp1251 and read as cp1252: no encoding round trip recovers it.
    russian = "Москва — столица России, город федерального значения. " * 4
    broken = russian.encode("cp1251").decode("cp1252")
    signals = signals_of(article() + "\n\n" + broken)
    assert signals["ftfy_fixed"] == 0
    assert signals["mojibake_per_kchar"] > 2.0
    assert signals["replacement_char_fraction"] == 0.0
    assert decide(article() + "\n\n" + broken) == "unrepairable_text"


def test_unrepairable_replacement_characters():
    # UTF-8 German decoded as ASCII with errors="replace": the bytes are gone.
    german = (
        "Die Straße über die Brücke wird für größere Fahrzeuge gesperrt. Schöne Grüße aus "
        "München, wo es heute früh geschneit hat. Die Bäckerei öffnet täglich um fünf Uhr."
    )
    lossy = german.encode("utf-8").decode("ascii", errors="replace")
    text = article() + "\n\n" + lossy
    signals = signals_of(text)
    assert signals["replacement_char_fraction"] > 0.01
    assert decide(text) == "unrepairable_text"
    # The U+FFFD rule alone decides it (the badness rule is switched off).
    assert decide(text, max_mojibake_per_kchar=None) == "unrepairable_text"
    assert decide(text, max_mojibake_per_kchar=None, max_replacement_char_fraction=None) is None


def test_gopher_dup_line_fraction():
    lines = [" ".join(SENTENCES[i : i + 2]) for i in range(0, 12, 2)]
    text = "\n".join(lines + ["Share this story with friends."] * 4)
    signals = signals_of(text)
    assert signals["dup_line_fraction"] == pytest.approx(3 / 10)
    assert decide(text) != "gopher_dup_line_fraction"  # 0.3 is not above 0.3
    text += "\nShare this story with friends."
    assert decide(text) == "gopher_dup_line_fraction"


def test_gopher_dup_para_fraction():
    long_paragraphs = ["\n".join(SENTENCES[i : i + 4]) for i in range(0, 16, 4)]
    short = "Thanks for reading our weekly newsletter."
    text = "\n\n".join(long_paragraphs + [short] * 4)
    signals = signals_of(text)
    assert signals["dup_para_fraction"] == pytest.approx(3 / 8)
    assert signals["dup_line_fraction"] == pytest.approx(3 / 20)
    assert decide(text) == "gopher_dup_para_fraction"


def test_gopher_dup_line_chars():
    long_line = " ".join(SENTENCES[:6])
    short_lines = [s.split(",")[0].rstrip(".") + "." for s in SENTENCES[6:14]]
    text = "\n\n".join(short_lines + [long_line, long_line])
    signals = signals_of(text)
    assert signals["dup_line_fraction"] == pytest.approx(1 / 10)
    assert signals["dup_line_char_fraction"] > 0.2
    assert decide(text) == "gopher_dup_line_chars"


def test_gopher_dup_para_chars():
    # Newlines inside a paragraph count as its characters but not as any line's: a repeated
    # paragraph of 30 one-character lines has a larger character share as paragraphs.
    tiny = "\n".join("abcdefghijklmnopqrstuvwxyz0123")
    others = unique_words(42, 3)
    text = "\n\n".join([tiny, tiny, "\n".join(others[:21]), "\n".join(others[21:])])
    signals = signals_of(text)
    assert signals["dup_line_fraction"] == pytest.approx(30 / 102)
    assert signals["dup_para_fraction"] == pytest.approx(1 / 4)
    assert signals["dup_line_char_fraction"] == pytest.approx(30 / (60 + 126))
    assert signals["dup_para_char_fraction"] == pytest.approx(59 / (118 + 126 + 40))
    assert decide(text) == "gopher_dup_para_chars"


def filler_text(phrase: list[str], repeats: int, fraction: float, gap: int) -> str:
    """`phrase` `repeats` times, separated by `gap` distinct 6-letter words, plus distinct
    words at the end so that the phrase occurrences make up `fraction` of the word characters.
    """
    phrase_chars = sum(map(len, phrase)) * repeats
    filler_chars = phrase_chars / fraction - phrase_chars
    n_filler = max(round(filler_chars / 6), gap * (repeats - 1))
    filler = unique_words(n_filler, 6)
    words: list[str] = []
    for r in range(repeats):
        words += phrase + filler[r * gap : (r + 1) * gap]
    words += filler[repeats * gap :]
    return " ".join(words)


@pytest.mark.parametrize(
    ("n", "limit"), [(2, 0.20), (3, 0.18), (4, 0.16)], ids=["top2", "top3", "top4"]
)
def test_gopher_top_ngram(n, limit):
    # Equal-length words: the top (n-1)-gram share is (n-1)/n of the top n-gram share, so a
    # share just above this rule's limit stays under the previous rule's.
    phrase = unique_words(n, 4, prefix="q")
    text = filler_text(phrase, repeats=8, fraction=limit + 0.01, gap=3)
    signals = signals_of(text)
    assert signals[f"top_{n}gram_char_fraction"] == pytest.approx(limit + 0.01, abs=0.003)
    for m in range(2, n):
        assert (
            signals[f"top_{m}gram_char_fraction"]
            < thresholds_default()[f"gopher_max_top_{m}gram_char_fraction"]
        )
    assert decide(text) == f"gopher_top_{n}gram"


@pytest.mark.parametrize("n", range(5, 11))
def test_gopher_dup_ngram(n):
    # A repeated n-gram covers the same words for every smaller size, so its share must sit
    # between this size's limit and the next smaller size's limit (0.01 above).
    limit = thresholds_default()[f"gopher_max_dup_{n}gram_char_fraction"]
    phrase = unique_words(n, 5, prefix="r")
    text = filler_text(phrase, repeats=2, fraction=limit + 0.005, gap=4)
    signals = signals_of(text)
    share = signals[f"dup_{n}gram_char_fraction"]
    assert limit < share <= limit + 0.01
    assert all(signals[f"dup_{m}gram_char_fraction"] == share for m in range(5, n + 1))
    assert all(signals[f"dup_{m}gram_char_fraction"] == 0 for m in range(n + 1, 11))
    assert decide(text) == f"gopher_dup_{n}gram"


SHORT_SENTENCES = [
    "Rivers carry cold water.",
    "Bakers bake bread early.",
    "The harbour stays quiet.",
    "Gulls circle above boats.",
    "Children chase bright kites.",
    "Storms arrive from the west.",
    "Lamps glow along streets.",
    "Farmers sell fresh apples.",
    "Ferries cross the narrow bay.",
    "Tourists admire old walls.",
    "Workers repair the pier.",
    "Families walk and talk.",
    "Fog lifts before noon.",
    "Markets open at dawn.",
    "Keepers tell long stories.",
    "Engineers survey the sea wall.",
]


def test_gopher_min_words():
    text = article(1, 3)
    assert signals_of(text)["words"] < 50
    assert decide(text) == "gopher_min_words"


def test_gopher_max_words_via_threshold():
    text = article()
    assert decide(text) is None
    assert decide(text, gopher_max_words=100) == "gopher_max_words"


def test_gopher_mean_word_length():
    short = " ".join(unique_words(60, 2))
    assert signals_of(short)["mean_word_length"] == 2.0
    assert decide(short) == "gopher_min_mean_word_length"
    long = " ".join(unique_words(60, 12))
    assert decide(long) == "gopher_max_mean_word_length"


def test_gopher_hash_ratio():
    tags = " ".join("#" + w for w in unique_words(12, 5))
    text = article() + "\n\n" + tags
    signals = signals_of(text)
    assert signals["hash_ratio"] == pytest.approx(12 / signals["words"])
    assert decide(article() + "\n\n" + tags[: len(tags) // 3]) is None
    assert decide(text, gopher_max_hash_ratio=0.2) is None
    assert decide(article() + "\n\n" + tags + " " + tags.replace("#", "##")) == (
        "gopher_hash_ratio"
    )


def test_gopher_ellipsis_ratio():
    words = article(2, 4).split()
    text = " ".join(w + "..." if i % 5 == 4 else w for i, w in enumerate(words))
    assert signals_of(text)["ellipsis_ratio"] > 0.1
    assert decide(text) == "gopher_ellipsis_ratio"


def test_gopher_bullet_lines():
    text = "\n".join(f"• {s}" for s in SENTENCES[:10])
    assert signals_of(text)["bullet_lines_ratio"] == 1.0
    assert decide(text) == "gopher_bullet_lines"
    # 9 bullets out of 10 lines is 0.9, not above it.
    assert decide("\n".join(f"- {s}" for s in SENTENCES[:9]) + "\n" + SENTENCES[9]) is None


def test_gopher_ellipsis_lines():
    lines = [s[:-1] + "…" if i % 5 < 2 else s for i, s in enumerate(SENTENCES[:10])]
    text = "\n".join(lines)
    signals = signals_of(text)
    assert signals["ellipsis_lines_ratio"] == pytest.approx(0.4)
    assert signals["ellipsis_ratio"] < 0.1
    assert decide(text) == "gopher_ellipsis_lines"


def test_gopher_alpha_words():
    words = article(3, 4).split()
    numbers = [str(1000 + i) for i in range(len(words) // 3)]
    mixed = [x for pair in zip(words, numbers + [""] * len(words), strict=False) for x in pair]
    text = " ".join(x for x in mixed if x)
    signals = signals_of(text)
    assert signals["alpha_words_ratio"] == pytest.approx(len(words) / (len(words) + len(numbers)))
    assert decide(text) == "gopher_alpha_words"


def test_gopher_stop_words():
    text = " ".join(STOPLESS)
    signals = signals_of(text)
    assert signals["stop_words"] == 0
    assert decide(text) == "gopher_stop_words"
    assert decide(text + " The end of the story.") is None


def test_c4_empty():
    # Two-word lines: Gopher is content, C4 keeps none of them.
    pairs = [" ".join(p) for p in zip(unique_words(30, 6), unique_words(30, 4), strict=True)]
    pairs[3] = "the harbour"
    pairs[17] = "with bread"
    text = "\n".join(pairs)
    cleaned, signals = quality_signals(text)
    assert cleaned == ""
    assert signals["c4_lines_kept"] == 0 and signals["c4_lines_removed"] == 30
    assert decide(text) == "c4_empty"


def test_c4_lorem_ipsum():
    text = article() + "\n\nLorem ipsum dolor sit amet, consectetur adipiscing elit."
    assert decide(text) == "c4_lorem_ipsum"
    assert decide(text, c4_drop_lorem_ipsum=False) is None


def test_c4_curly_bracket():
    text = article() + "\n\nThe page printed {customer_name} instead of a real name."
    assert decide(text) == "c4_curly_bracket"
    assert decide(text, c4_drop_curly_bracket=None) is None


def test_c4_min_sentences():
    text = "\n\n".join(
        " ".join(SENTENCES[i : i + 4]).replace(".", ",").rstrip(",") + "." for i in (0, 4, 8, 12)
    )
    signals = signals_of(text)
    assert signals["c4_sentences"] == 4 and signals["words"] > 50
    assert decide(text) == "c4_min_sentences"
    assert decide(text, c4_min_sentences=4) is None


def test_fineweb_line_punct():
    lines = [f"{SENTENCES[i]} {SENTENCES[i + 1][:-1]}" for i in range(0, 16, 2)]
    text = "\n".join(lines)
    signals = signals_of(text)
    assert signals["line_punct_ratio"] == 0.0
    assert decide(text) == "fineweb_line_punct"
    lines[0] += "."
    assert decide("\n".join(lines)) is None  # 1/8 = 0.125 is not below 0.12


def test_fineweb_short_lines():
    text = "\n".join(SHORT_SENTENCES)
    signals = signals_of(text)
    assert signals["short_line_ratio"] == 1.0
    assert signals["newline_ratio"] <= 0.3
    assert decide(text) == "fineweb_short_lines"


def test_fineweb_char_dup():
    # A repeated line of four words: no repeated 5-gram for Gopher, 2.5 % of the characters.
    lines = (
        SENTENCES[:8]
        + ["Thanks for reading, everyone."]
        + SENTENCES[8:]
        + ["Thanks for reading, everyone."]
    )
    text = "\n".join(lines)
    signals = signals_of(text)
    assert signals["char_dup_ratio"] == pytest.approx(29 / sum(map(len, lines)))
    assert signals["dup_line_char_fraction"] == signals["char_dup_ratio"]
    assert decide(text) == "fineweb_char_dup"
    assert decide(text, fineweb_max_char_dup_ratio=0.1) is None


def test_fineweb_list_ratio():
    # One six-word sentence per paragraph: two newlines per six words.
    six_words = [" ".join(s.split()[:6]).rstrip(",.") + "." for s in SENTENCES]
    text = "\n\n".join(six_words)
    signals = signals_of(text)
    assert signals["newline_ratio"] == pytest.approx(30 / 96)
    assert signals["short_line_ratio"] <= 0.67
    assert decide(text) == "fineweb_list_ratio"


# --------------------------------------------------------------------------------------------
# Thresholds change decisions
# --------------------------------------------------------------------------------------------


def test_changed_threshold_changes_decision():
    short = " ".join(SHORT_SENTENCES[:6])  # six sentences, fewer than 50 words
    assert decide(short) == "gopher_min_words"
    assert decide(short, gopher_min_words=10) is None
    assert decide(short, gopher_min_words=None) is None
    assert decide(article(), gopher_min_mean_word_length=6.0) == "gopher_min_mean_word_length"


# --------------------------------------------------------------------------------------------
# Signal values against hand-computed numbers
# --------------------------------------------------------------------------------------------


def test_repetition_hand_computed():
    s = gopher_repetition_signals("a b\na b\nc")
    assert s["dup_line_fraction"] == pytest.approx(1 / 3)
    assert s["dup_line_char_fraction"] == pytest.approx(3 / 7)
    assert s["dup_para_fraction"] == 0.0 and s["dup_para_char_fraction"] == 0.0
    # 2-grams: (a b) x2, (b a), (b c): 2 occurrences x 2 characters / 5 word characters.
    assert s["top_2gram_char_fraction"] == pytest.approx(4 / 5)
    assert s["top_3gram_char_fraction"] == 0.0  # (a b a), (b a b), (a b c) all once

    s = gopher_repetition_signals("First para.\n\nSecond one here.\n\nFirst para.")
    assert s["dup_para_fraction"] == pytest.approx(1 / 3)
    assert s["dup_para_char_fraction"] == pytest.approx(11 / 38)


def test_top_ngram_ties_take_the_longest():
    # (aaaa b) and (c d) both occur twice: the longer one (5 characters) counts.
    for text in ("aaaa b aaaa b c d c d", "c d c d aaaa b aaaa b"):
        s = gopher_repetition_signals(text)
        assert s["top_2gram_char_fraction"] == pytest.approx(2 * 5 / 14)


def test_dup_ngram_hand_computed():
    s = gopher_repetition_signals("one two three four five six one two three four five seven")
    # Both occurrences of the 5-gram count: 2 x 19 of 46 word characters.
    assert s["dup_5gram_char_fraction"] == pytest.approx(38 / 46)
    assert s["dup_6gram_char_fraction"] == 0.0
    # Overlapping repeats: every word is covered, each counted once.
    s = gopher_repetition_signals("a b c d e a b c d e a b c d e")
    assert all(s[f"dup_{n}gram_char_fraction"] == 1.0 for n in range(5, 11))
    assert s["top_4gram_char_fraction"] == pytest.approx(3 * 4 / 15)


def reference_ngram_signals(text: str) -> dict[str, float]:
    """The plain definitions, for checking the incremental implementation."""
    words = text.split()
    total = sum(map(len, words))
    out = {}
    for n in range(2, 11):
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        counts = Counter(grams)
        if n <= 4:
            best = max(counts.values(), default=0)
            if best < 2:
                out[f"top_{n}gram_char_fraction"] = 0.0
                continue
            chars = best * max(sum(map(len, g)) for g in counts if counts[g] == best)
            out[f"top_{n}gram_char_fraction"] = chars / total
        else:
            covered = [False] * len(words)
            for i, g in enumerate(grams):
                if counts[g] > 1:
                    covered[i : i + n] = [True] * n
            chars = sum(len(w) for w, c in zip(words, covered, strict=True) if c)
            out[f"dup_{n}gram_char_fraction"] = chars / total if total else 0.0
    return out


def test_ngram_signals_match_plain_definitions():
    rng = random.Random(7)
    for _ in range(150):
        vocab = ["a", "bb", "ccc", "the", "of", "river", "x"][: rng.randint(2, 7)]
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 60)))
        got = gopher_repetition_signals(text)
        for key, value in reference_ngram_signals(text).items():
            assert got[key] == pytest.approx(value), (key, text)


def test_quality_hand_computed():
    s = gopher_quality_signals("Hello, world! -- The end ...")
    assert s["words"] == 4  # "--" and "..." are not words
    assert s["mean_word_length"] == pytest.approx((6 + 6 + 3 + 3) / 4)
    assert s["ellipsis_ratio"] == pytest.approx(1 / 4)
    assert s["ellipsis_lines_ratio"] == 1.0
    assert s["alpha_words_ratio"] == pytest.approx(4 / 6)
    assert s["stop_words"] == 1
    assert s["hash_ratio"] == 0.0
    s = gopher_quality_signals("- one\n• two #x\n\nthree 3 ½ ² (THE) with, to-do _ 42")
    assert s["bullet_lines_ratio"] == pytest.approx(2 / 3)
    # 14 tokens; "-", "•" and "_" are punctuation, "3", "½", "²", "42" are numbers (words
    # without a letter), "#x" is a word.
    assert s["words"] == 11
    assert s["alpha_words_ratio"] == pytest.approx(7 / 14)
    assert s["stop_words"] == 2  # "(THE)" and "with,"; "to-do" is not "to"
    assert s["hash_ratio"] == pytest.approx(1 / 11)


def test_c4_clean_exact_output():
    text = (
        "Gravity pulls every object toward the ground.[1] It is weak [citation needed] but "
        "constant.\n"
        "Please enable JavaScript to view the comments.\n"
        "Short line\n"
        "This site uses cookies to improve your experience.\n"
        "\n"
        "Second paragraph starts here [Edit] and continues.\n"
        "Privacy Policy"
    )
    cleaned, s = c4_clean(text)
    assert cleaned == (
        "Gravity pulls every object toward the ground. It is weak but constant.\n"
        "\n"
        "Second paragraph starts here and continues."
    )
    assert s == {
        "c4_lines_removed": 4,
        "c4_chars_removed": len(text) - len(cleaned),
        "c4_lines_kept": 2,
        "c4_sentences": 3,
        "c4_lorem_ipsum": 0,
        "c4_curly_bracket": 0,
    }


def test_c4_clean_params_and_paragraphs():
    text = "Cookie policy here.\n\nA line without an end\nA line with an end.\n\n\n\nNext one here."
    cleaned, _ = c4_clean(text)
    assert cleaned == "A line without an end\nA line with an end.\n\nNext one here."
    cleaned, s = c4_clean(text, {"filter_no_terminal_punct": True})
    assert cleaned == "A line with an end.\n\nNext one here."
    assert s["c4_lines_removed"] == 2
    # A paragraph whose lines are all dropped leaves a single blank line.
    cleaned, _ = c4_clean("First kept line.\n\nno\n\nLast kept line.")
    assert cleaned == "First kept line.\n\nLast kept line."
    long_word = "x" * 30
    cleaned, _ = c4_clean(f"Keep this line.\nDrop {long_word} here.", {"max_word_length": 20})
    assert cleaned == "Keep this line."
    cleaned, _ = c4_clean("Cited fact [2] stays.", {"remove_citations": False})
    assert cleaned == "Cited fact [2] stays."
    assert C4_DEFAULTS["filter_no_terminal_punct"] is False


def test_count_sentences():
    assert count_sentences("Hello world. How are you? Fine!") == 3
    assert count_sentences("No end mark") == 1
    assert count_sentences("") == 0
    assert count_sentences("Pi is 3.14 today. Yes") == 2
    assert count_sentences('He said "stop." Then he left...') == 2
    assert count_sentences("Wow! ! ?") == 1


def test_fineweb_hand_computed():
    lines = [
        "One two three four.",
        "Short line here",
        "One two three four.",
        "A much longer line that goes on and on without an ending",
        "She asked “why?”",
    ]
    s = fineweb_signals("\n".join(lines))
    assert s["line_punct_ratio"] == pytest.approx(3 / 5)
    assert s["short_line_ratio"] == pytest.approx(4 / 5)
    assert s["char_dup_ratio"] == pytest.approx(19 / sum(map(len, lines)))
    assert s["newline_ratio"] == pytest.approx(4 / 26)


# --------------------------------------------------------------------------------------------
# Repair
# --------------------------------------------------------------------------------------------


def test_mojibake_repaired():
    broken = "Café naïve façade".encode().decode("cp1252")
    assert broken == "CafÃ© naÃ¯ve faÃ§ade"
    text, s = normalise_text(broken)
    assert text == "Café naïve façade"
    assert s == {"ftfy_fixed": 1, "mojibake_per_kchar": 0.0, "replacement_char_fraction": 0.0}
    # Repaired text passes the repair rules.
    assert decide(article() + "\n\n" + broken + " is open today.") is None


@pytest.mark.parametrize(
    "clean",
    [
        "It’s a “quoted” word — with dashes… and prices of 5 €, ½ price, 20 °C.",
        "Herzliche Grüße an alle Leserinnen und Leser, bis zur nächsten Ausgabe.",
        "Москва — столица России, крупнейший город страны.",
        "我们今天去公园散步，天气很好。「你好」他说。",
        "À l’œuvre, ça coûte 3 € ! « Très bien », dit-il.",
    ],
)
def test_clean_text_has_no_repair_signals(clean):
    text, s = normalise_text(clean)
    assert text == clean
    assert s == {"ftfy_fixed": 0, "mojibake_per_kchar": 0.0, "replacement_char_fraction": 0.0}


def test_lossy_decode_has_high_replacement_fraction():
    text, s = normalise_text("Gr\ufffd\ufffde aus M\ufffd\ufffdnchen, sch\ufffd\ufffdn!")
    assert s["replacement_char_fraction"] == pytest.approx(6 / len(text))
    assert s["replacement_char_fraction"] > 0.1


REPAIRED = {"ftfy_fixed": 1, "mojibake_per_kchar": 0.0, "replacement_char_fraction": 0.0}


def test_normalise_whitespace_and_controls():
    raw = "  Hello\t\t world  \r\n\r\n\r\n\r\nNext\x00 line\u00a0\u3000here \x0c\n \n\x07"
    text, s = normalise_text(raw)
    assert text == "Hello world\n\nNext line here"
    assert s["ftfy_fixed"] == 0
    # NFC: a decomposed é is composed.
    assert normalise_text("Cafe\u0301")[0] == "Caf\u00e9"
    # ftfy's work beyond encodings counts as repair: terminal escapes, U+2028, C1 controls
    # (read as the Windows-1252 characters browsers show for them).
    assert normalise_text("\x1b[31mRed\x1b[0m alert") == ("Red alert", REPAIRED)
    assert normalise_text("one\u2028two") == ("one\ntwo", REPAIRED)
    assert normalise_text("Wait\x85 what") == ("Wait… what", REPAIRED)


def random_mojibake_strings(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    odd = "ÂÃÎÐØÙ√≈‚βāГўВЂСР“”’…—éüß°×€™œŒ\ufffd\xa0\x85\x93¢¦¨«»ñ中Ж"
    common = "abcXY .,!?\n  "
    out = []
    for i in range(count):
        density = 0.05 if i % 2 else 0.4
        n = rng.randint(1, 80)
        out.append("".join(rng.choice(odd if rng.random() < density else common) for _ in range(n)))
    out.append("Café naïve façade".encode().decode("cp1252"))
    out.append("Привет, как дела?".encode().decode("cp1251"))
    return out


def test_fast_badness_equals_ftfy_badness():
    for s in random_mojibake_strings(11, 400):
        assert mojibake_badness(s) == badness(s), repr(s)


def test_repair_signals_equal_ftfy_on_the_output():
    rng = random.Random(17)
    spaces = ["\t", "  ", "\xa0", "\u3000", "\n", "\n\n\n", " \n "]
    for s in random_mojibake_strings(19, 300):
        s = "".join(c + rng.choice(spaces) if rng.random() < 0.2 else c for c in s)
        text, signals = normalise_text(s)
        assert signals["mojibake_per_kchar"] == badness(text) * 1000.0 / max(1, len(text))
        assert signals["replacement_char_fraction"] == text.count("\ufffd") / max(1, len(text))


def test_ftfy_gate_never_skips_a_change():
    for s in random_mojibake_strings(13, 300):
        s = q._C0_BEFORE_FTFY.sub("", s)
        fixed = ftfy.fix_text(s, q._FTFY_CONFIG)
        if fixed != s:
            assert q._ftfy_may_change(s), repr(s)
        assert q._fix_text(s) == fixed, repr(s)

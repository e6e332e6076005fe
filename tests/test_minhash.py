"""MinHash signatures and LSH banding: datasketch equivalence, estimator accuracy, band keys,
and speed against datasketch's per-document MinHash. No Spark."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest
from datasketch import MinHash

from tokenmill.udfs import minhash as mh
from tokenmill.udfs.minhash import (
    EMPTY_HASH,
    BandLayout,
    band_hashes,
    band_layout,
    candidate_probability,
    estimated_jaccard,
    exact_jaccard,
    hash_shingles,
    is_empty_signature,
    permutations,
    shingle_hash32,
    shingle_hashes,
    signatures,
    signatures_with_shingles,
    threshold_midpoint,
    word_shingles,
)
from tokenmill.udfs.text import normalise_for_dedup

TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. The dog, unimpressed, went back to "
    "sleep in 2024 -- and the fox wandered off into the forest to find something else to do.",
    "german": "Über den Wolken muss die Freiheit wohl grenzenlos sein. Größere Städte wie München "
    "und Düsseldorf liegen weit unter uns; die Straßen glänzen im Regen, Grüße an alle!",
    "chinese": "我们今天去公园散步。 天气 很好， 然后 我们 一起 吃饭 ， 聊天 到 很晚 才 回家 。",
    "one_word": "Hello!",
    "odd_whitespace": "tabs\tand\u2003em  spaces\n\nnewlines\x1cand  more   words here too",
    "punctuation_only": "!!! ... ???",
    "empty": "",
}


def reference(text: str, num_perm: int, seed: int) -> MinHash:
    m = MinHash(num_perm=num_perm, seed=seed, hashfunc=shingle_hash32)
    m.update_batch([s.encode("utf-8") for s in word_shingles(text)])
    return m


def random_texts(count: int, words: int, seed: int) -> list[str]:
    """Texts of random words over a seeded vocabulary with German letters (so the non-ASCII
    normalisation path runs, as for most of a crawl)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzäöüß"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(20_000)]
    return [" ".join(rng.choices(vocab, k=words)) for _ in range(count)]


# --- shingles and hashes ------------------------------------------------------------------------


def test_word_shingles():
    assert sorted(word_shingles("A b, C d e f!", n=5)) == ["a b c d e", "b c d e f"]
    assert word_shingles("one two three", n=5) == ["one two three"]
    assert word_shingles("Café 42", n=5) == ["cafe 00"]
    assert word_shingles("", n=5) == []
    assert word_shingles(" ?! ", n=5) == []
    # Repeated n-grams count once.
    assert sorted(word_shingles("x y x y x y", n=2)) == ["x y", "y x"]
    with pytest.raises(ValueError, match="n "):
        word_shingles("a b", n=0)


def test_shingle_hash32_matches_vectorised_hashing():
    rng = np.random.default_rng(3)
    raw = [rng.integers(0, 256, rng.integers(0, 80), dtype=np.uint8).tobytes() for _ in range(3000)]
    raw += [b"", b"\x00", b"\x00\x00", b"a", b"a\x00", b" ", "grüße".encode()]
    expected = np.array([shingle_hash32(b) for b in raw], dtype=np.uint32)
    np.testing.assert_array_equal(hash_shingles(raw), expected)
    assert all(0 <= int(h) < 2**32 for h in expected)
    # Trailing NULs and padding must change the hash.
    assert len({shingle_hash32(b) for b in (b"", b"\x00", b"\x00\x00", b"a", b"a\x00")}) == 5

    for text in [*TEXTS.values(), *random_texts(20, 300, seed=4)]:
        shingles = word_shingles(text)
        expected = np.unique(np.array([shingle_hash32(s.encode()) for s in shingles], np.uint32))
        np.testing.assert_array_equal(shingle_hashes(text), expected)
        np.testing.assert_array_equal(np.unique(hash_shingles(shingles)), expected)


def test_hash_paths_for_long_buffers_agree(monkeypatch):
    """The branches taken only for very large inputs (uncached power tables, reduced prefix sums)
    give the same hashes as the common path."""
    shingles = [s.encode() for s in word_shingles(" ".join(random_texts(1, 2000, seed=5)))]
    expected = hash_shingles(shingles)
    monkeypatch.setattr(mh, "_power_cache", (np.ones(1, np.uint64), np.ones(1, np.uint64)))
    monkeypatch.setattr(mh, "_POWER_CACHE_MAX", 1 << 6)
    monkeypatch.setattr(mh, "_UNREDUCED_PREFIX_MAX", 1 << 6)
    np.testing.assert_array_equal(hash_shingles(shingles), expected)
    assert len(mh._power_cache[0]) == 1


# --- signatures vs datasketch -------------------------------------------------------------------


@pytest.mark.parametrize("num_perm", [128, 64])
@pytest.mark.parametrize("seed", [1, 7])
def test_signatures_equal_datasketch(num_perm, seed):
    names = list(TEXTS)
    sigs = signatures([TEXTS[k] for k in names], num_perm=num_perm, seed=seed)
    assert sigs.shape == (len(names), num_perm)
    assert sigs.dtype == np.uint32
    for row, name in zip(sigs, names, strict=True):
        ref = reference(TEXTS[name], num_perm, seed)
        assert ref.hashvalues.dtype == np.uint32
        np.testing.assert_array_equal(row, ref.hashvalues, err_msg=name)

    a, b = permutations(num_perm, seed)
    ref_a, ref_b = MinHash(num_perm=num_perm, seed=seed).permutations
    np.testing.assert_array_equal(a, ref_a)
    np.testing.assert_array_equal(b, ref_b)


def test_empty_documents_get_datasketch_initial_values():
    sigs = signatures(["", None, float("nan"), " --- ", "real words in here"], num_perm=64)
    initial = MinHash(num_perm=64).hashvalues
    for row in sigs[:4]:
        np.testing.assert_array_equal(row, initial)
    assert (initial == EMPTY_HASH).all()
    assert is_empty_signature(sigs).tolist() == [True, True, True, True, False]
    assert is_empty_signature(sigs[0]) is True
    assert signatures([], num_perm=32).shape == (0, 32)


def test_signatures_across_chunks_equal_one_chunk(monkeypatch):
    texts = random_texts(40, 120, seed=6) + ["", "short text"]
    expected = signatures(texts, num_perm=32)
    monkeypatch.setattr(mh, "_CHUNK_BYTES", 500)
    np.testing.assert_array_equal(signatures(texts, num_perm=32), expected)
    for text, row in zip(texts, expected, strict=True):
        np.testing.assert_array_equal(row, reference(text, 32, 1).hashvalues)


def test_signatures_with_shingles_matches_separate_calls(monkeypatch):
    texts = [*TEXTS.values(), None, *random_texts(30, 80, seed=11)]
    monkeypatch.setattr(mh, "_CHUNK_BYTES", 700)
    sigs, shingles = signatures_with_shingles(texts, num_perm=64, n=4, seed=3)
    np.testing.assert_array_equal(sigs, signatures(texts, num_perm=64, n=4, seed=3))
    assert len(shingles) == len(texts)
    for text, hashes in zip(texts, shingles, strict=True):
        assert hashes.dtype == np.uint32
        np.testing.assert_array_equal(hashes, shingle_hashes(text or "", n=4))
        assert len(hashes) == len(word_shingles(text or "", n=4))


def test_shingle_size_is_honoured():
    text = TEXTS["english"]
    for n in (1, 3, 9):
        m = MinHash(num_perm=64, hashfunc=shingle_hash32)
        m.update_batch([s.encode() for s in word_shingles(text, n=n)])
        np.testing.assert_array_equal(signatures([text], num_perm=64, n=n)[0], m.hashvalues)


# --- estimator accuracy -------------------------------------------------------------------------


def pair_with_similarity(target: float, seed: int) -> tuple[str, str]:
    """A 300-word text and a copy with the fewest words replaced (in a seeded order) that brings
    the exact Jaccard similarity of their shingle sets to `target` or below."""
    rng = random.Random(seed)
    # Letters only: normalisation maps digits to 0, which would collapse numbered words.
    vocab = ["".join(rng.choices("abcdefghij", k=6)) for _ in range(6000)]
    words = rng.choices(vocab[:5000], k=300)
    order = rng.sample(range(300), 300)
    original = " ".join(words)
    original_shingles = word_shingles(original)

    def edited(k: int) -> str:
        copy = list(words)
        for pos, fresh in zip(order[:k], vocab[5000:], strict=False):
            copy[pos] = fresh
        return " ".join(copy)

    # Similarity only falls as more words are replaced (fresh words are never shared), so the
    # smallest sufficient number of replacements can be bisected.
    lo, hi = 0, 300
    while lo < hi:
        mid = (lo + hi) // 2
        if exact_jaccard(original_shingles, word_shingles(edited(mid))) <= target:
            hi = mid
        else:
            lo = mid + 1
    return original, edited(lo)


@pytest.mark.parametrize("num_perm", [128, 256])
def test_estimated_jaccard_within_statistical_bounds(num_perm):
    for target in (0.3, 0.5, 0.8, 0.95):
        for seed in range(5):
            a, b = pair_with_similarity(target, seed)
            exact = exact_jaccard(word_shingles(a), word_shingles(b))
            assert target - 0.05 <= exact <= target
            sig = signatures([a, b], num_perm=num_perm, seed=seed + 1)
            est = estimated_jaccard(sig[0], sig[1])
            bound = 4 * math.sqrt(exact * (1 - exact) / num_perm) + 0.02
            assert abs(est - exact) <= bound, (target, seed, est, exact)


def test_estimated_and_exact_jaccard_shapes():
    sigs = signatures(random_texts(6, 50, seed=8), num_perm=16)
    assert estimated_jaccard(sigs[0], sigs[0]) == 1.0
    rowwise = estimated_jaccard(sigs[:3], sigs[3:])
    assert rowwise.shape == (3,) and rowwise.dtype == np.float64
    assert estimated_jaccard(sigs[0], sigs).shape == (6,)
    with pytest.raises(ValueError, match="lengths"):
        estimated_jaccard(sigs[0], sigs[0, :8])
    assert exact_jaccard(["a", "b"], ["b", "c"]) == pytest.approx(1 / 3)
    assert exact_jaccard([], []) == 0.0
    with pytest.raises(TypeError):
        exact_jaccard("abc", ["a"])


# --- band layout and probabilities --------------------------------------------------------------


def test_default_band_layout():
    layout = band_layout()
    assert layout == band_layout(128, 20)
    assert layout.bands == 20
    assert layout.rows_per_band == (6,) * 12 + (7,) * 8
    assert sum(layout.rows_per_band) == 128 == layout.rows_used
    assert layout.offsets[:3] == (0, 6, 12)
    assert layout.offsets[12:14] == (72, 79)
    assert candidate_probability(0.8, layout) > 0.99
    assert 0.15 < candidate_probability(0.5, layout) < 0.27
    mid = threshold_midpoint(layout)
    assert 0.58 < mid < 0.66
    assert candidate_probability(mid, layout) == pytest.approx(0.5, abs=1e-6)
    assert candidate_probability(0.0, layout) == 0.0
    assert candidate_probability(1.0, layout) == 1.0


def test_fixed_rows_layout_and_uniform_probability():
    layout = band_layout(128, 16, rows=8)
    assert layout.rows_per_band == (8,) * 16
    layout = band_layout(128, 9, rows=9)
    assert layout.rows_used == 81 and layout.offsets[-1] == 72
    for j in (0.2, 0.5, 0.7):
        assert candidate_probability(j, layout) == pytest.approx(1 - (1 - j**9) ** 9)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"bands": 0}, "bands"),
        ({"bands": -3}, "bands"),
        ({"bands": 129}, "bands"),
        ({"num_perm": 0}, "num_perm"),
        ({"rows": 0}, "rows"),
        ({"bands": 20, "rows": 7}, "num_perm"),
    ],
)
def test_impossible_layouts_raise(kwargs, param):
    with pytest.raises(ValueError, match=param):
        band_layout(**kwargs)


def test_band_layout_validates_direct_construction():
    with pytest.raises(ValueError, match="rows_per_band"):
        BandLayout(128, ())
    with pytest.raises(ValueError, match="rows_per_band"):
        BandLayout(10, (6, 6))
    with pytest.raises(ValueError, match="rows_per_band"):
        BandLayout(10, (0, 6))
    with pytest.raises(ValueError, match="j "):
        candidate_probability(1.5, band_layout())


# --- band hashes --------------------------------------------------------------------------------


def test_band_hashes_identical_and_single_position_changes():
    layout = band_layout()
    sig = signatures([TEXTS["german"]])[0]
    keys = band_hashes(np.stack([sig, sig.copy()]), layout)
    assert keys.shape == (2, 20) and keys.dtype == np.int64
    np.testing.assert_array_equal(keys[0], keys[1])

    band_of = np.repeat(np.arange(layout.bands), layout.rows_per_band)
    changed = np.repeat(sig[None, :], 128, axis=0)
    changed[np.arange(128), np.arange(128)] ^= np.uint32(1)
    changed_keys = band_hashes(changed, layout)
    for pos in range(128):
        differing = np.flatnonzero(changed_keys[pos] != keys[0])
        assert differing.tolist() == [band_of[pos]], pos


def test_band_hashes_ignore_positions_outside_bands():
    layout = band_layout(128, 10, rows=5)
    sig = signatures([TEXTS["english"]], num_perm=128)[0]
    other = sig.copy()
    other[60:] += np.uint32(1)
    keys = band_hashes(np.stack([sig, other]), layout)
    np.testing.assert_array_equal(keys[0], keys[1])


def test_equal_slices_in_different_bands_get_different_keys():
    layout = band_layout()
    constant = np.full((1, 128), 12345, dtype=np.uint32)
    assert len(set(band_hashes(constant, layout)[0].tolist())) == 20
    sig = signatures([TEXTS["english"]])[0].copy()
    sig[6:12] = sig[0:6]
    keys = band_hashes(sig[None, :], layout)[0]
    assert keys[0] != keys[1]


def test_no_band_hash_collisions_among_random_signatures():
    rng = np.random.default_rng(9)
    sigs = rng.integers(0, 2**32, size=(5000, 128), dtype=np.uint32)
    keys = band_hashes(sigs, band_layout())
    assert len(np.unique(keys)) == keys.size
    with pytest.raises(ValueError, match="shape"):
        band_hashes(sigs[:, :64], band_layout())


# --- speed --------------------------------------------------------------------------------------


def test_speed_against_datasketch():
    texts = random_texts(2000, 500, seed=10)
    signatures(texts[:10])  # warm the permutation and power-table caches

    start = time.perf_counter()
    ours = signatures(texts)
    ours_rate = len(texts) / (time.perf_counter() - start)

    subset = texts[:200]
    start = time.perf_counter()
    refs = [reference(t, 128, 1) for t in subset]
    ds_rate = len(subset) / (time.perf_counter() - start)

    # datasketch's default C-implemented sha1 hash: a different signature, but the fastest
    # per-document datasketch configuration, for scale.
    start = time.perf_counter()
    for t in subset:
        MinHash(num_perm=128).update_batch([s.encode() for s in word_shingles(t)])
    ds_sha1_rate = len(subset) / (time.perf_counter() - start)

    # The shared dedup normalisation is most of the cost on non-ASCII text; shown for scale.
    start = time.perf_counter()
    for t in subset:
        normalise_for_dedup(t)
    normalise_rate = len(subset) / (time.perf_counter() - start)

    for row, ref in zip(ours, refs, strict=False):
        np.testing.assert_array_equal(row, ref.hashvalues)
    print(
        f"\nsignatures: {ours_rate:,.0f} docs/s; datasketch (same hashfunc): {ds_rate:,.0f} docs/s"
        f" -> {ours_rate / ds_rate:.1f}x; datasketch (sha1): {ds_sha1_rate:,.0f} docs/s"
        f" -> {ours_rate / ds_sha1_rate:.1f}x; normalise_for_dedup alone: {normalise_rate:,.0f}"
        " docs/s"
    )
    assert ours_rate > ds_rate

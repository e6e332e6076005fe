"""Token-share blending: shares, determinism, statelessness, epochs, stream reads."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.tokenize.blending import (
    BlendedIndex,
    SourceStream,
    blend,
    epochs,
    rational_weights,
    realised_shares,
    sample_tokens,
    window_permutation,
)
from tokenmill.tokenize.shards import RangeReader, ShardReader, ShardWriter

SOURCES = {"cc": 50_000_000, "books": 20_000_000, "wiki": 3_000_000}
WEIGHTS = {"cc": 0.67, "books": 0.2, "wiki": 0.13}


def reference_blend(weights, n):
    """The rule as stated, one step at a time in floats: argmax w*(i+1) - count, low index."""
    counts = np.zeros(len(weights))
    out = []
    for i in range(n):
        err = np.asarray(weights) * (i + 1) - counts
        s = int(np.argmax(err))  # argmax returns the first maximum: ties go to the low index
        out.append(s)
        counts[s] += 1
    return out


def test_blend_matches_the_stated_rule():
    for w in ([0.67, 0.2, 0.13], [0.5, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4], [1 / 3, 1 / 3, 1 / 3]):
        source_of, draw = blend(w, 2_000)
        assert source_of.tolist() == reference_blend(w, 2_000), w
        # Draw numbers count 0, 1, 2, ... within each source.
        for s in range(len(w)):
            assert draw[source_of == s].tolist() == list(range(int((source_of == s).sum())))


def test_blend_period_repeats_exactly():
    p, q = rational_weights([0.67, 0.2, 0.13])
    assert (p, q) == ([67, 20, 13], 100)
    source_of, _ = blend([0.67, 0.2, 0.13], 1_000)
    np.testing.assert_array_equal(source_of[:100], source_of[100:200])
    assert np.bincount(source_of[:100]).tolist() == [67, 20, 13]


def test_realised_shares_within_one_percent():
    index = BlendedIndex(SOURCES, WEIGHTS, seq_len=1024, seed=7, num_samples=100_000)
    shares = realised_shares(index, 100_000)
    for name, w in WEIGHTS.items():
        assert abs(shares[name] - w) < 0.01, (name, shares[name])
    # Unshuffled, every prefix is within one sample per source of its target.
    plain = BlendedIndex(SOURCES, WEIGHTS, 1024, 7, 100_000, shuffle=False)
    for n in (10, 1_000, 33_333):
        for name, share in realised_shares(plain, n).items():
            assert abs(share * n - WEIGHTS[name] * n) < 1, (n, name)


def test_deterministic_and_seed_dependent():
    a = BlendedIndex(SOURCES, WEIGHTS, 1024, seed=11, num_samples=50_000)
    b = BlendedIndex(dict(reversed(SOURCES.items())), WEIGHTS, 1024, seed=11, num_samples=50_000)
    for attr in ("source_of", "sample_in_source", "epoch_of"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
    c = BlendedIndex(SOURCES, WEIGHTS, 1024, seed=12, num_samples=50_000)
    assert not np.array_equal(a.source_of, c.source_of)


def test_resume_from_any_index_is_just_reading_on():
    full = BlendedIndex(SOURCES, WEIGHTS, 1024, seed=3, num_samples=20_000)
    # A "restarted" trainer rebuilds the index from the same inputs and starts at i.
    for start in (0, 1, 9_999, 19_990):
        resumed = BlendedIndex(SOURCES, WEIGHTS, 1024, seed=3, num_samples=20_000)
        got = [resumed[i] for i in range(start, min(start + 10, 20_000))]
        assert got == [full[i] for i in range(start, min(start + 10, 20_000))]
        np.testing.assert_array_equal(resumed.source_of[start:], full.source_of[start:])


def test_small_source_wraps_only_after_an_exhausted_epoch():
    sources = {"big": 10_000_000, "tiny": 64 * 50 + 1}  # tiny: exactly 50 windows an epoch
    index = BlendedIndex(sources, {"big": 0.9, "tiny": 0.1}, seq_len=64, seed=5,
                         num_samples=2_000, shuffle=False)
    assert index.samples_per_epoch["tiny"] == 50
    ep = epochs(index)
    assert ep["tiny"] == pytest.approx(200 / 50)
    assert ep["big"] < 1
    tiny = index.names.index("tiny")
    mine = index.source_of == tiny
    samples, eps = index.sample_in_source[mine], index.epoch_of[mine]
    assert eps.tolist() == sorted(eps.tolist())
    for e in range(4):
        # Each epoch is a full permutation of the 50 windows: no repeat before exhaustion.
        assert sorted(samples[eps == e].tolist()) == list(range(50))
    # Different epochs are shuffled differently.
    assert samples[eps == 0].tolist() != samples[eps == 1].tolist()


def test_window_permutation_is_a_bijection():
    for n in (1, 2, 3, 7, 64, 1000, 4097):
        perm = window_permutation(np.arange(n), n, seed=1, source="cc", epochs=0)
        assert sorted(perm.tolist()) == list(range(n))
    a = window_permutation(np.arange(1000), 1000, 1, "cc", 0)
    assert not np.array_equal(a, np.arange(1000))
    assert not np.array_equal(a, window_permutation(np.arange(1000), 1000, 1, "books", 0))


def test_token_range_windows_overlap_by_one():
    index = BlendedIndex(SOURCES, WEIGHTS, 1024, 0, 10)
    assert index.token_range(0) == (0, 1025)
    assert index.token_range(3) == (3072, 4097)
    n = index.samples_per_epoch["wiki"]
    assert index.token_range(n - 1)[1] <= SOURCES["wiki"]


def test_bad_inputs():
    with pytest.raises(ValueError, match="fewer than seq_len"):
        BlendedIndex({"a": 100, "b": 10}, {"a": 0.5, "b": 0.5}, 64, 0, 10)
    with pytest.raises(ValueError, match="no tokens listed"):
        BlendedIndex({"a": 1000}, {"a": 0.5, "b": 0.5}, 64, 0, 10)


def make_shards(tmp_path, rng, n_shards, vocab=50_000):
    docs_per_shard, readers = [], []
    for k in range(n_shards):
        docs = [np.append(rng.integers(1, vocab, int(rng.integers(0, 40))), 0) for _ in range(30)]
        with ShardWriter(tmp_path / f"s{k}", vocab) as w:
            for d in docs:
                w.add_document(d)
        docs_per_shard.append(docs)
        readers.append(ShardReader(tmp_path / f"s{k}"))
    return docs_per_shard, readers


def test_source_stream_crosses_document_and_shard_boundaries(tmp_path):
    rng = np.random.default_rng(0)
    docs, readers = make_shards(tmp_path, rng, 3)
    flat = np.concatenate([np.concatenate(d) for d in docs])
    for stream in (SourceStream(readers), SourceStream([RangeReader.local(r.path_prefix)
                                                         for r in readers])):
        assert stream.num_tokens == flat.size
        for _ in range(200):
            a = int(rng.integers(0, flat.size))
            b = int(rng.integers(a, min(flat.size, a + 200) + 1))
            np.testing.assert_array_equal(stream.read(a, b), flat[a:b])
        np.testing.assert_array_equal(stream.read(0, flat.size), flat)
    # locate() names the shard, document and offset holding a stream position.
    stream = SourceStream(readers)
    for pos in (0, 1, len(docs[0][0]), readers[0].num_tokens, flat.size - 1):
        shard, doc, off = stream.locate(pos)
        assert docs[shard][doc][off] == flat[pos]
        assert 0 <= off < len(docs[shard][doc])


def test_sample_tokens_reads_the_window(tmp_path):
    rng = np.random.default_rng(1)
    docs, readers = make_shards(tmp_path, rng, 2)
    flat = np.concatenate([np.concatenate(d) for d in docs])
    stream = SourceStream(readers)
    index = BlendedIndex({"only": stream.num_tokens}, {"only": 1.0}, 16, 0, 40)
    for i in range(40):
        _, window, _ = index[i]
        np.testing.assert_array_equal(
            sample_tokens(index, {"only": stream}, i), flat[window * 16 : window * 16 + 17]
        )

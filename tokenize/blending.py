"""Deterministic token-share blending: the global sample order as a pure function.

Inputs: each source's token count, the mixture weights, the sequence length, a seed and the
number of samples. Output: for every global sample index, which source it reads and which
window of that source's token stream. No state is kept between calls, so a trainer resumes
at sample ``i`` simply by reading from ``i`` on, and every rank computes the same order.

A sample is a window of ``seq_len + 1`` tokens (inputs plus the shifted targets) from the
source's *stream*: its shards in manifest order, each shard's documents back to back exactly
as packed. Window ``k`` covers stream tokens ``[k * seq_len, k * seq_len + seq_len + 1)``, so
consecutive windows share one token and a source has ``(tokens - 1) // seq_len`` windows per
epoch.

Order of construction:

1. *Blend.* Sample ``i`` goes to the source furthest behind its share,
   ``argmax_s weight_s * (i + 1) - count_s(i)``, ties to the lowest source index (sources are
   sorted by name). This is Megatron-LM's blending rule, with ``i + 1`` where Megatron uses
   ``max(i, 1)``. Weights are first made rational, ``p_s / q`` with ``q <= 10**6`` (exact for
   ratios of small integers, within 1e-6 otherwise), and the rule is run in integer
   arithmetic: ties are then exact on every platform, and the sequence is periodic with period
   ``q`` (see ``_blend_period``), so only one period is ever simulated.
2. *Within-source order.* The ``k``-th sample drawn from a source is epoch ``k // n_s``,
   position ``k % n_s`` of that epoch's permutation of its windows; each epoch has its own
   pseudo-random permutation (a keyed Feistel network, see ``window_permutation``) keyed by
   (seed, crc32 of the source name, epoch). A source's windows repeat only after the whole
   epoch has been used, and no permutation is ever materialised.
3. *Global shuffle.* The blended positions are permuted by ``np.random.default_rng(seed)``.
   The permutation depends on ``num_samples``: changing it reshuffles the whole order.
"""

from __future__ import annotations

import math
import zlib
from array import array
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from tokenmill.tokenize.manifest import Manifest

MAX_DENOMINATOR = 10**6
# Distinguishes the per-(source, epoch) streams from the global shuffle's default_rng(seed).
_SOURCE_STREAM_TAG = 0x50E5


def rational_weights(weights: Sequence[float]) -> tuple[list[int], int]:
    """Integers ``p`` and ``q`` with ``p_s / q ~= weights_s`` (normalised), ``sum(p) == q``.

    Weights that are ratios of small integers (decimals like 0.67, thirds, or decimals
    renormalised after a source dropped out, 0.045 / 0.955 = 9 / 191) are recovered exactly,
    with the least common denominator up to 10**6. Anything else is rounded to ``q = 10**6``
    by largest remainder, so each share is off by under 1e-6.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("need at least one weight")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all 0: {weights}")
    w = w / w.sum()
    fracs = [Fraction(float(x)).limit_denominator(MAX_DENOMINATOR) for x in w]
    q = math.lcm(*(f.denominator for f in fracs))
    if q <= MAX_DENOMINATOR:
        p = [int(f * q) for f in fracs]
        if sum(p) == q and all(abs(pi / q - wi) <= 1e-9 for pi, wi in zip(p, w, strict=True)):
            return p, q
    q = MAX_DENOMINATOR
    scaled = w * q
    floor = np.floor(scaled).astype(np.int64)
    # Hand the remaining units to the largest fractional parts (stable: lower index wins).
    order = np.argsort(-(scaled - floor), kind="stable")
    floor[order[: q - int(floor.sum())]] += 1
    g = math.gcd(q, *(int(x) for x in floor))
    return [int(x) // g for x in floor], q // g


def _blend_period(p: Sequence[int], q: int, n: int) -> np.ndarray:
    """The first ``n`` (``<= q``) choices of the largest-deficit rule for weights ``p / q``.

    Why one period suffices: let ``d_s(i) = p_s * i / q - count_s(i)``, with ``sum_s d_s = 0``.
    The deficits before choice ``i`` sum to 1 (in units of a sample), so the chosen source's
    is at least ``1/S > 0``; choosing it lowers it by 1, to above -1, and unchosen sources only
    rise. Hence ``d_s > -1`` always. At ``i = q`` every ``d_s`` is an integer, so each is
    ``>= 0``, and since they sum to 0 all are 0: the state is the initial one again and the
    sequence repeats with period ``q``.
    """
    # A sequential rule over a handful of sources: a tight pure-Python loop on small ints
    # (~1 us a step) beats per-step numpy calls. At most q <= 10**6 steps run.
    s_range = range(1, len(p))
    counts = [0] * len(p)
    out = array("H", bytes(2 * n))
    p0 = p[0]
    for i in range(n):
        x = i + 1
        best = 0
        best_err = p0 * x - q * counts[0]  # q * (error of source 0), exact
        for s in s_range:
            err = p[s] * x - q * counts[s]
            if err > best_err:
                best, best_err = s, err
        counts[best] += 1
        out[i] = best
    if n == q and counts != list(p):
        raise AssertionError(f"blend period broke: counts {counts} != weights {list(p)}")
    return np.frombuffer(out, dtype=np.uint16).copy()


def blend(weights: Sequence[float], num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Source index and per-source draw number (0, 1, 2, ... within each source) per sample."""
    if len(weights) > np.iinfo(np.uint16).max:
        raise ValueError("too many sources")
    p, q = rational_weights(weights)
    period = _blend_period(p, q, min(num_samples, q))
    # Draw number within one period: the rank of each position among its source's positions.
    rank = np.empty(period.size, dtype=np.int64)
    for s in range(len(p)):
        where = np.flatnonzero(period == s)
        rank[where] = np.arange(where.size)
    reps = -(-num_samples // period.size) if period.size else 0
    source_of = np.tile(period, reps)[:num_samples]
    cycle = np.repeat(np.arange(reps, dtype=np.int64), period.size)[:num_samples]
    draw = np.tile(rank, reps)[:num_samples] + cycle * np.asarray(p, dtype=np.int64)[source_of]
    return source_of, draw


# splitmix64's finaliser: a cheap, well-mixed 64-bit hash, vectorised over uint64 arrays
# (numpy's uint64 arithmetic wraps, which is what the hash wants).
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FEISTEL_ROUNDS = 4
_CHUNK = 1 << 16  # elements per pass: keeps the temporaries in cache


def _mix(z: np.ndarray) -> np.ndarray:
    """Hash ``z`` in place and return it."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def _feistel_once(v: np.ndarray, a: int, b: int, keys: np.ndarray) -> np.ndarray:
    # An (unbalanced) Feistel network on (a + b)-bit values: each round is invertible
    # whatever the round function, so the whole is a bijection of [0, 2**(a + b)).
    left, right = v >> np.uint64(b), v & np.uint64((1 << b) - 1)
    la, lb = a, b
    for k in range(keys.shape[0]):
        f = _mix(right ^ keys[k])
        f &= np.uint64((1 << la) - 1)
        f ^= left
        left, right, la, lb = right, f, lb, la
    left <<= np.uint64(lb)
    left |= right
    return left


def _round_keys(seed: int, source: str, epochs: np.ndarray) -> np.ndarray:
    """Feistel round keys, shape (rounds, len(epochs)), derived from (seed, source, epoch)."""
    # crc32 of the name, not the source's position, so adding a source leaves others' orders.
    seq = np.random.SeedSequence([seed, _SOURCE_STREAM_TAG, zlib.crc32(source.encode("utf-8"))])
    base = seq.generate_state(_FEISTEL_ROUNDS, dtype=np.uint64)
    e = np.asarray(epochs, dtype=np.uint64)
    return np.stack([_mix(_mix((e + np.uint64(1)) * _GOLDEN) ^ base[k]) for k in range(len(base))])


def window_permutation(
    positions: np.ndarray, n: int, seed: int, source: str, epochs: np.ndarray | int
) -> np.ndarray:
    """``perm_epoch(position)`` for a pseudo-random permutation of ``range(n)`` per epoch.

    The permutation is a keyed Feistel network with cycle-walking, so any position is mapped
    without materialising the permutation: cost and memory follow the draws, not the size of
    the source (a Common Crawl source can hold hundreds of millions of windows).
    """
    positions = np.asarray(positions, dtype=np.uint64)
    if positions.size and int(positions.max()) >= n:
        raise ValueError(f"positions must be < n = {n}")
    if n <= 1:
        return positions.astype(np.int64)
    ep = np.broadcast_to(np.asarray(epochs, dtype=np.int64), positions.shape)
    # One key column per epoch in range; a chunk drawn from a single epoch (the usual case:
    # draws come in epoch order) uses it as a scalar rather than a per-element gather.
    e_min = int(ep.min()) if ep.size else 0
    e_max = int(ep.max()) if ep.size else 0
    table = _round_keys(seed, source, np.arange(e_min, e_max + 1))
    bits = int(n - 1).bit_length()
    a, b = bits // 2, bits - bits // 2
    out = np.empty(positions.size, dtype=np.int64)
    limit = np.uint64(n)
    for lo in range(0, positions.size, _CHUNK):
        hi = min(lo + _CHUNK, positions.size)
        chunk_ep = ep[lo:hi]
        first, last = int(chunk_ep[0]), int(chunk_ep[-1])
        single = first == last and bool(np.all(chunk_ep == first))
        k = table[:, first - e_min : first - e_min + 1] if single else table[:, chunk_ep - e_min]
        v = _feistel_once(positions[lo:hi], a, b, k)
        # Cycle-walk: values that land in [n, 2**bits) are mapped again until inside; the
        # domain is under 2n, so under two passes are needed on average.
        bad = np.flatnonzero(v >= limit)
        while bad.size:
            v[bad] = _feistel_once(v[bad], a, b, k if single else k[:, bad])
            bad = bad[v[bad] >= limit]
        out[lo:hi] = v.astype(np.int64)
    return out


class BlendedIndex:
    """The global sample order over several sources (see the module docstring).

    Arrays, indexed by global sample index ``i`` (after the global shuffle):
    ``source_of[i]`` (index into ``names``), ``sample_in_source[i]`` (window number within
    the source, ``0 <= . < samples_per_epoch``), ``epoch_of[i]``.
    """

    def __init__(
        self,
        sources: Mapping[str, int],
        weights: Mapping[str, float],
        seq_len: int,
        seed: int,
        num_samples: int,
        shuffle: bool = True,
    ) -> None:
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        unknown = set(weights) - set(sources)
        if unknown:
            raise ValueError(f"weights for sources with no tokens listed: {sorted(unknown)}")
        # Sorted names: the order (and tie-breaking) must not depend on dict insertion order.
        self.names: list[str] = sorted(name for name in sources if weights.get(name, 0) > 0)
        if not self.names:
            raise ValueError("no source has a positive weight")
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self.num_samples = int(num_samples)
        self.tokens = {name: int(sources[name]) for name in self.names}
        total_w = sum(float(weights[name]) for name in self.names)
        self.weights = {name: float(weights[name]) / total_w for name in self.names}
        self.samples_per_epoch = {
            name: max(0, (tokens - 1) // self.seq_len) for name, tokens in self.tokens.items()
        }
        empty = [name for name, n in self.samples_per_epoch.items() if n == 0]
        if empty:
            raise ValueError(
                f"sources with weight but fewer than seq_len + 1 = {self.seq_len + 1} tokens: "
                f"{empty}"
            )

        source_of, draw = blend([self.weights[n] for n in self.names], self.num_samples)
        per_epoch = np.array([self.samples_per_epoch[n] for n in self.names], dtype=np.int64)
        epoch_of = draw // per_epoch[source_of]
        position = draw - epoch_of * per_epoch[source_of]
        sample = np.empty(self.num_samples, dtype=np.int64)
        for s, name in enumerate(self.names):
            mine = np.flatnonzero(source_of == s)
            sample[mine] = window_permutation(
                position[mine], int(per_epoch[s]), self.seed, name, epoch_of[mine]
            )

        if shuffle:
            order = np.random.default_rng(self.seed).permutation(self.num_samples)
            source_of, sample, epoch_of = source_of[order], sample[order], epoch_of[order]
        self.source_of: np.ndarray = source_of
        self.sample_in_source: np.ndarray = sample
        self.epoch_of: np.ndarray = epoch_of.astype(np.int32)

    @classmethod
    def from_manifest(
        cls,
        manifest: Manifest,
        seq_len: int,
        num_samples: int,
        seed: int | None = None,
        shuffle: bool = True,
    ) -> BlendedIndex:
        """Build from a manifest's token counts and weights (and its seed unless given)."""
        if seed is None:
            seed = manifest.seed or 0
        return cls(manifest.source_tokens(), manifest.weights, seq_len, seed, num_samples, shuffle)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> tuple[str, int, int]:
        """``(source, window number within the source, epoch)`` of global sample ``i``."""
        return (
            self.names[int(self.source_of[i])],
            int(self.sample_in_source[i]),
            int(self.epoch_of[i]),
        )

    def token_range(self, source_sample: int) -> tuple[int, int]:
        """The ``[start, end)`` stream positions of a source's window ``source_sample``."""
        start = int(source_sample) * self.seq_len
        return start, start + self.seq_len + 1


def realised_shares(index: BlendedIndex, n: int | None = None) -> dict[str, float]:
    """Share of tokens from each source over the first ``n`` samples (all by default).

    Every sample is ``seq_len`` training tokens, so token shares equal sample shares.
    """
    n = index.num_samples if n is None else min(n, index.num_samples)
    if n <= 0:
        return {name: 0.0 for name in index.names}
    counts = np.bincount(index.source_of[:n], minlength=len(index.names))
    return {name: float(counts[s]) / n for s, name in enumerate(index.names)}


def epochs(index: BlendedIndex) -> dict[str, float]:
    """Passes over each source made by all ``num_samples`` samples (windows drawn / windows).

    Counting in windows rather than tokens, this matches the epoch a window is drawn from;
    ``num_samples * seq_len * weight / tokens`` (manifest.epochs_for_budget) is within a
    window of it.
    """
    counts = np.bincount(index.source_of, minlength=len(index.names))
    return {
        name: float(counts[s]) / index.samples_per_epoch[name]
        for s, name in enumerate(index.names)
    }


# --------------------------------------------------------------------------------------------
# From stream positions to tokens


class TokenShardLike(Protocol):
    """What SourceStream needs of a shard reader (ShardReader and RangeReader have it)."""

    @property
    def num_tokens(self) -> int: ...

    @property
    def document_offsets(self) -> np.ndarray: ...

    def read_tokens(self, start: int, end: int) -> np.ndarray: ...


class SourceStream:
    """A source's shards, in manifest order, as one concatenated token stream.

    Position ``pos`` of the stream is found in two searches: the shard by ``searchsorted`` on
    the cumulative shard token counts, then (for ``locate``) the document by ``searchsorted``
    on that shard's cumulative document lengths. Reading a range needs only the first: within
    a shard the documents are back to back, so a range is one read per shard it spans.
    """

    def __init__(self, shard_readers: Sequence[TokenShardLike]) -> None:
        self.readers = list(shard_readers)
        sizes = np.array([r.num_tokens for r in self.readers], dtype=np.int64)
        self.shard_starts = np.zeros(len(self.readers) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.shard_starts[1:])

    @property
    def num_tokens(self) -> int:
        return int(self.shard_starts[-1])

    def _shard_of(self, pos: int) -> int:
        # The last shard whose start is <= pos (empty shards are skipped by "right").
        return int(np.searchsorted(self.shard_starts, pos, side="right")) - 1

    def locate(self, pos: int) -> tuple[int, int, int]:
        """``(shard, document, offset in document)`` of stream position ``pos``."""
        if not 0 <= pos < self.num_tokens:
            raise IndexError(f"position {pos} outside the stream of {self.num_tokens} tokens")
        shard = self._shard_of(pos)
        local = pos - int(self.shard_starts[shard])
        offsets = self.readers[shard].document_offsets
        doc = int(np.searchsorted(offsets, local, side="right")) - 1
        return shard, doc, local - int(offsets[doc])

    def read(self, start: int, end: int) -> np.ndarray:
        """Tokens ``[start, end)`` of the stream, across document and shard boundaries."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"range [{start}, {end}) outside 0..{self.num_tokens}")
        parts = []
        pos = start
        while pos < end:
            shard = self._shard_of(pos)
            shard_start = int(self.shard_starts[shard])
            stop = min(end, int(self.shard_starts[shard + 1]))
            parts.append(self.readers[shard].read_tokens(pos - shard_start, stop - shard_start))
            pos = stop
        if not parts:
            dtype = self.readers[0].read_tokens(0, 0).dtype if self.readers else np.int64
            return np.empty(0, dtype=dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def sample_tokens(
    index: BlendedIndex, streams: Mapping[str, SourceStream], i: int
) -> np.ndarray:
    """The ``seq_len + 1`` tokens of global sample ``i``: inputs ``[:-1]``, targets ``[1:]``."""
    source, window, _ = index[i]
    start, end = index.token_range(window)
    return streams[source].read(start, end)

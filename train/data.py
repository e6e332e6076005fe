"""Batches from the token shards, in the manifest's fixed global sample order.

The order is tokenize.blending's pure function of (seed, manifest, weights, sample index).
A step consumes the next ``global_batch`` samples of it; rank r of W, accumulation step a
reads samples ``consumed + (a * W + r) * micro_batch + [0, micro_batch)``. The only loader
state is therefore ``consumed`` (plus the batches skipped after loss spikes): a resumed run,
one with another process count, or one rolled back reads exactly the batches it would have.
No worker processes, no random state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenmill.tokenize.blending import BlendedIndex, SourceStream
from tokenmill.tokenize.manifest import Manifest, ShardEntry, read_manifest, shard_prefix
from tokenmill.tokenize.shards import ShardReader

log = logging.getLogger(__name__)


@dataclass
class DocumentRef:
    """One document a sample touches: where it sits in the shards and its doc_id."""

    shard: str  # the manifest's shard path, relative to the manifest
    doc_index: int
    doc_id: str | None  # None when the shard has no .docids sidecar
    source: str


def _doc_ids(prefix: Path) -> list[str] | None:
    try:
        from tokenmill.tokenize.shards import read_doc_ids
    except ImportError:  # an older tokenize package: no sidecars
        return None
    return read_doc_ids(prefix)


class ShardData:
    """The manifest's sources as token streams, split into training and held-out shards."""

    def __init__(self, manifest_path: str | Path, holdout_last_shard: bool) -> None:
        self.manifest_path = Path(manifest_path)
        self.manifest: Manifest = read_manifest(self.manifest_path)
        self.eos_id = int(self.manifest.tokenizer["eos_id"])
        self.vocab_size = int(self.manifest.tokenizer["vocab_size"])
        self.train_shards: dict[str, list[ShardEntry]] = {}
        self.val_shards: dict[str, list[ShardEntry]] = {}
        for source in sorted(self.manifest.sources):
            if self.manifest.weights.get(source, 0) <= 0:
                continue
            shards = self.manifest.shards_of(source)
            if holdout_last_shard and len(shards) >= 2:
                self.train_shards[source], self.val_shards[source] = shards[:-1], shards[-1:]
            else:
                self.train_shards[source] = shards
        self.train_streams = {s: self._stream(e) for s, e in self.train_shards.items()}
        self.val_streams = {s: self._stream(e) for s, e in self.val_shards.items()}
        self._doc_id_cache: dict[str, list[str] | None] = {}

    def _stream(self, entries: list[ShardEntry]) -> SourceStream:
        return SourceStream([ShardReader(shard_prefix(self.manifest_path, e)) for e in entries])

    def tokenizer_path(self) -> Path:
        return (self.manifest_path.resolve().parent / self.manifest.tokenizer["path"]).resolve()

    def documents_in(self, source: str, start: int, end: int) -> list[DocumentRef]:
        """The documents covering training-stream positions [start, end) of a source."""
        stream, entries = self.train_streams[source], self.train_shards[source]
        first, last = stream.locate(start), stream.locate(end - 1)
        refs = []
        for shard in range(first[0], last[0] + 1):
            lo = first[1] if shard == first[0] else 0
            hi = last[1] if shard == last[0] else len(stream.readers[shard]) - 1
            entry = entries[shard]
            if entry.path not in self._doc_id_cache:
                self._doc_id_cache[entry.path] = _doc_ids(shard_prefix(self.manifest_path, entry))
            ids = self._doc_id_cache[entry.path]
            for doc in range(lo, hi + 1):
                refs.append(DocumentRef(entry.path, doc, ids[doc] if ids else None, source))
        return refs


def unigram_logprobs(data: ShardData, max_tokens: int = 50_000_000) -> np.ndarray:
    """log p(token id) over the training shards (add-one smoothed), for the batch checks.

    Counted on an even spread of up to ``max_tokens`` tokens: from each shard a prefix of
    its share, which is plenty for the frequencies of a 32k-200k vocabulary.
    """
    readers = [r for stream in data.train_streams.values() for r in stream.readers]
    per_shard = max(1, max_tokens // max(1, len(readers)))
    counts = np.ones(data.vocab_size, dtype=np.float64)
    for r in readers:
        tokens = r.read_tokens(0, min(r.num_tokens, per_shard)).astype(np.int64)
        counts += np.bincount(tokens[tokens < data.vocab_size], minlength=data.vocab_size)
    return np.log(counts / counts.sum())


class BatchPlan:
    """Which samples each step and rank reads, and their tokens."""

    def __init__(self, data: ShardData, seq_len: int, global_batch: int, micro_batch: int,
                 world_size: int, rank: int, num_samples: int, seed: int) -> None:
        if global_batch % (micro_batch * world_size):
            raise ValueError(
                f"data.global_batch {global_batch} is not a multiple of micro_batch "
                f"{micro_batch} x {world_size} processes"
            )
        self.data = data
        self.seq_len, self.global_batch, self.micro_batch = seq_len, global_batch, micro_batch
        self.world_size, self.rank = world_size, rank
        self.grad_accum = global_batch // (micro_batch * world_size)
        tokens = {s: stream.num_tokens for s, stream in data.train_streams.items()}
        weights = {s: data.manifest.weights[s] for s in tokens}
        self.index = BlendedIndex(tokens, weights, seq_len, seed, num_samples)

    def samples_of(self, consumed: int, accum_step: int) -> np.ndarray:
        """Global sample indices this rank reads at this accumulation step."""
        first = consumed + (accum_step * self.world_size + self.rank) * self.micro_batch
        return np.arange(first, first + self.micro_batch)

    def tokens(self, samples: np.ndarray) -> np.ndarray:
        """(len(samples), seq_len + 1) int64 tokens: inputs [:, :-1], targets [:, 1:]."""
        if samples.size and int(samples.max()) >= self.index.num_samples:
            raise IndexError(
                f"sample {int(samples.max())} is past the {self.index.num_samples} samples of "
                f"this run's order (raise data.spare_batches, or train.steps was raised after "
                f"the run started)"
            )
        out = np.empty((samples.size, self.seq_len + 1), dtype=np.int64)
        for row, i in enumerate(samples):
            source, window, _ = self.index[int(i)]
            start, end = self.index.token_range(window)
            out[row] = self.data.train_streams[source].read(start, end)
        return out

    def sources(self, samples: np.ndarray) -> list[str]:
        return [self.index.names[int(self.index.source_of[int(i)])] for i in samples]

    def documents(self, samples: np.ndarray) -> list[tuple[int, DocumentRef]]:
        """(sample, document) pairs: every document the samples' windows touch."""
        refs = []
        for i in samples:
            source, window, _ = self.index[int(i)]
            start, end = self.index.token_range(window)
            refs.extend((int(i), d) for d in self.data.documents_in(source, start, end))
        return refs


def validation_tokens(data: ShardData, source: str, seq_len: int, count: int, rank: int,
                      world_size: int) -> np.ndarray:
    """This rank's share of the first ``count * world_size`` windows of a held-out stream.

    Fixed windows from the start of the held-out shard, so every validation pass (and every
    run on this manifest) scores the same tokens. Every rank gets the same number of rows:
    a sharded forward is a collective, so ranks must run the same number of them.
    """
    stream = data.val_streams[source]
    windows = (stream.num_tokens - 1) // seq_len
    per_rank = min(count, windows // world_size)
    mine = [rank + k * world_size for k in range(per_rank)]
    out = np.empty((len(mine), seq_len + 1), dtype=np.int64)
    for row, w in enumerate(mine):
        out[row] = stream.read(w * seq_len, w * seq_len + seq_len + 1)
    return out


def garble(shape: tuple[int, int], vocab_size: int, seed: int) -> np.ndarray:
    """Uniformly random token ids: the debug hook's stand-in for a corrupted batch."""
    return np.random.default_rng(seed).integers(0, vocab_size, size=shape, dtype=np.int64)

"""Token shards in Megatron-LM's indexed-dataset layout (``MMIDIDX`` version 1).

A shard is a pair of files sharing a prefix: ``<prefix>.bin`` holds the tokens of every
document back to back, ``<prefix>.idx`` the header and per-sequence lengths and byte offsets.
The layout is documented in ``FORMAT.md`` beside this file. We write one sequence per
document (the document's tokens followed by EOS), so sequences and documents coincide; the
readers also accept Megatron files whose documents span several sequences. A shard may also
have a ``<prefix>.docids`` sidecar naming each document (Megatron ignores it): the trainer
uses it to name the documents of a batch it quarantines.

This module needs numpy only: it is shared by the Spark tokenize job and a torch trainer.
"""

from __future__ import annotations

import os
import secrets
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
# magic (9) + version (uint64) + dtype code (uint8) + sequence count + document count (uint64).
HEADER = struct.Struct("<9sQBQQ")
HEADER_SIZE = HEADER.size  # 34 bytes; "<" means no alignment padding, as Megatron writes it.

# Megatron-LM's dtype codes (megatron/core/datasets/indexed_dataset.py, class DType).
# The gap is deliberate: there is no uint32 code, so vocabularies that do not fit uint16 use
# int32.
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_FOR_DTYPE: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPE_CODES.items()}

# Megatron's own cut-off (DType.optimal_dtype): below 65,500 ids uint16, otherwise int32.
UINT16_VOCAB_LIMIT = 65_500

_INT32_MAX = np.iinfo(np.int32).max


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """The token dtype Megatron would pick for a vocabulary of ``vocab_size`` ids."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size > _INT32_MAX:
        raise ValueError(f"vocab_size {vocab_size} does not fit int32 token ids")
    return np.dtype(np.uint16) if vocab_size < UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def bin_path(path_prefix: str | Path) -> Path:
    return Path(f"{os.fspath(path_prefix)}.bin")


def idx_path(path_prefix: str | Path) -> Path:
    return Path(f"{os.fspath(path_prefix)}.idx")


def docids_path(path_prefix: str | Path) -> Path:
    return Path(f"{os.fspath(path_prefix)}.docids")


# --------------------------------------------------------------------------------------------
# Writing


@dataclass(frozen=True)
class ShardStats:
    """What a closed ShardWriter wrote."""

    documents: int
    tokens: int
    bytes: int  # size of the .bin file
    bin_path: Path
    idx_path: Path
    docids_path: Path | None = None  # None when the documents were added without doc ids


def encode_index(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """The .idx bytes for one-sequence-per-document shard with these document lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 0 or lengths.max() > _INT32_MAX):
        raise ValueError("sequence lengths must fit int32")
    n = int(lengths.size)
    pointers = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lengths[:-1] * dtype.itemsize, out=pointers[1:])
    # One sequence per document: document i is sequence range [i, i + 1), so the document
    # index array is 0..n and the header's "document count" is its length, n + 1.
    document_indices = np.arange(n + 1, dtype=np.int64)
    header = HEADER.pack(MAGIC, VERSION, CODE_FOR_DTYPE[dtype], n, n + 1)
    return b"".join(
        (
            header,
            lengths.astype("<i4").tobytes(),
            pointers.astype("<i8").tobytes(),
            document_indices.astype("<i8").tobytes(),
        )
    )


def _fsync_dir(path: Path) -> None:
    # The renames are only durable once the directory entry is flushed too.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data files are synced
    finally:
        os.close(fd)


class ShardWriter:
    """Writes one shard, atomically: readers see either no shard or a complete one.

    Tokens stream into a temporary ``.bin`` beside the target, so memory holds only the
    document lengths (4 bytes a document). ``close()`` (or leaving the ``with`` block
    normally) fsyncs and renames the ``.bin`` into place, then the ``.docids`` sidecar (when
    doc ids were given), then the ``.idx`` last, since readers key on the index. Leaving the
    ``with`` block by an exception deletes the temporaries and writes nothing.
    """

    def __init__(self, path_prefix: str | Path, vocab_size: int) -> None:
        self.vocab_size = int(vocab_size)
        self.dtype = dtype_for_vocab(self.vocab_size)
        self.bin_path = bin_path(path_prefix)
        self.idx_path = idx_path(path_prefix)
        # Same folder as the target, so os.replace is a rename within one filesystem.
        tag = secrets.token_hex(8)
        self._bin_tmp = self.bin_path.with_name(f"{self.bin_path.name}.tmp-{tag}")
        self._idx_tmp = self.idx_path.with_name(f"{self.idx_path.name}.tmp-{tag}")
        self.docids_path = docids_path(path_prefix)
        self._docids_tmp = self.docids_path.with_name(f"{self.docids_path.name}.tmp-{tag}")
        # Doc ids stream to their own temporary like the tokens, so memory stays at the
        # lengths; opened by the first document that names one.
        self._docids_file: Any = None
        # Closed by close() or abort(); "x" refuses to clobber a concurrent writer's temp.
        self._file = open(self._bin_tmp, "xb")
        self._lengths = array("i")
        self._tokens = 0
        self._state = "open"
        self._stats: ShardStats | None = None

    # Counts, live while writing and final after close().
    @property
    def documents(self) -> int:
        return len(self._lengths)

    @property
    def tokens(self) -> int:
        return self._tokens

    @property
    def bytes(self) -> int:
        return self._tokens * self.dtype.itemsize

    @property
    def stats(self) -> ShardStats | None:
        return self._stats

    def add_document(self, tokens: np.ndarray | Sequence[int], doc_id: str | None = None) -> None:
        """Append one document. ``tokens`` must already end with EOS (the caller adds it).

        ``doc_id`` names the document in the ``.docids`` sidecar. Give it for every document
        of the shard or for none: a sidecar with gaps could not be lined up with the index.
        """
        if self._state != "open":
            raise ValueError(f"ShardWriter for {self.bin_path} is {self._state}")
        named = self._docids_file is not None
        if self.documents and (doc_id is not None) != named:
            raise ValueError(
                f"{self.bin_path}: give a doc_id for every document or for none "
                f"(document {self.documents} {'lacks one' if named else 'has one'})"
            )
        if doc_id is not None:
            if not isinstance(doc_id, str):
                raise ValueError(f"doc_id must be a string, got {type(doc_id).__name__}")
            # One id a line: a line break inside an id would shift every later document.
            # \r too, since text-mode readers turn it into a line break.
            if "\n" in doc_id or "\r" in doc_id:
                raise ValueError(f"doc_id {doc_id!r} contains a line break")
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"a document must be a 1-D token array, got shape {arr.shape}")
        if arr.size == 0:
            # Every document carries at least its EOS; an empty one means a caller bug.
            raise ValueError("empty document: tokens must include the EOS token")
        if arr.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
        if arr.size > _INT32_MAX:
            raise ValueError("document longer than int32 sequence lengths allow")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}) for {self.dtype}; "
                f"got min {lo}, max {hi}"
            )
        data = np.ascontiguousarray(arr, dtype=self.dtype.newbyteorder("<"))
        if doc_id is not None:
            if self._docids_file is None:
                self._docids_file = open(self._docids_tmp, "x", encoding="utf-8", newline="\n")
            self._docids_file.write(doc_id + "\n")
        self._file.write(data.data)
        self._lengths.append(int(arr.size))
        self._tokens += int(arr.size)

    def close(self) -> ShardStats:
        """Publish the shard (idempotent) and return its counts."""
        if self._state == "closed":
            assert self._stats is not None
            return self._stats
        if self._state != "open":
            raise ValueError(f"ShardWriter for {self.bin_path} is {self._state}")
        try:
            for f in (self._file, self._docids_file):
                if f is not None:
                    f.flush()
                    os.fsync(f.fileno())
                    f.close()
            index = encode_index(np.frombuffer(self._lengths, dtype=np.int32), self.dtype)
            with open(self._idx_tmp, "xb") as f:
                f.write(index)
                f.flush()
                os.fsync(f.fileno())
            os.replace(self._bin_tmp, self.bin_path)
            # Before the .idx: once a reader sees the index, the sidecar beside it is this
            # shard's. Without doc ids, an older sidecar under the same prefix would
            # misname the new documents, so it goes.
            if self._docids_file is not None:
                os.replace(self._docids_tmp, self.docids_path)
            else:
                self.docids_path.unlink(missing_ok=True)
            os.replace(self._idx_tmp, self.idx_path)
            _fsync_dir(self.idx_path.parent)
        except BaseException:
            self.abort()
            raise
        self._state = "closed"
        self._stats = ShardStats(
            documents=self.documents,
            tokens=self.tokens,
            bytes=self.bytes,
            bin_path=self.bin_path,
            idx_path=self.idx_path,
            docids_path=self.docids_path if self._docids_file is not None else None,
        )
        return self._stats

    def abort(self) -> None:
        """Discard everything written so far; the target files are left untouched."""
        if self._state == "closed":
            return
        self._state = "aborted"
        for f in (self._file, self._docids_file):
            if f is not None and not f.closed:
                f.close()
        for tmp in (self._bin_tmp, self._idx_tmp, self._docids_tmp):
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


# --------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class IndexInfo:
    """A parsed .idx file."""

    dtype: np.dtype
    sequence_lengths: np.ndarray  # int32, one per sequence
    sequence_pointers: np.ndarray  # int64 byte offsets into .bin
    document_indices: np.ndarray  # int64, documents + 1 entries, starting at 0

    @property
    def num_sequences(self) -> int:
        return int(self.sequence_lengths.size)

    @property
    def num_documents(self) -> int:
        return int(self.document_indices.size) - 1


def parse_index(buf: bytes | memoryview | np.ndarray, where: str = "<index>") -> IndexInfo:
    """Parse and validate .idx bytes. Arrays are views of ``buf`` (zero-copy for a memmap)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    if raw.size < HEADER_SIZE:
        raise ValueError(f"{where}: {raw.size} bytes is too short for an MMIDIDX header")
    magic, version, code, n_seq, n_doc_entries = HEADER.unpack(raw[:HEADER_SIZE].tobytes())
    if magic != MAGIC:
        raise ValueError(f"{where}: bad magic {magic!r}, not a Megatron MMIDIDX index")
    if version != VERSION:
        raise ValueError(f"{where}: unsupported MMIDIDX version {version} (expected {VERSION})")
    if code not in DTYPE_CODES:
        raise ValueError(f"{where}: unknown dtype code {code}")
    dtype = DTYPE_CODES[code]
    if n_doc_entries < 1:
        raise ValueError(f"{where}: document count {n_doc_entries} must be at least 1")
    expected = HEADER_SIZE + 4 * n_seq + 8 * n_seq + 8 * n_doc_entries
    # Multimodal Megatron indices append one int8 mode per sequence; accept and ignore them.
    if raw.size not in (expected, expected + n_seq):
        raise ValueError(
            f"{where}: size {raw.size} bytes does not match the header "
            f"({n_seq} sequences, {n_doc_entries} document entries: {expected} bytes)"
        )
    off = HEADER_SIZE
    lengths = raw[off : off + 4 * n_seq].view("<i4")
    off += 4 * n_seq
    pointers = raw[off : off + 8 * n_seq].view("<i8")
    off += 8 * n_seq
    documents = raw[off : off + 8 * n_doc_entries].view("<i8")
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"{where}: negative sequence length")
    if documents[0] != 0 or documents[-1] != n_seq or np.any(np.diff(documents) < 0):
        raise ValueError(
            f"{where}: document indices must rise from 0 to the sequence count {n_seq}"
        )
    # Readers here treat a shard as one flat token array, so sequences must be back to back.
    expected_ptr = np.zeros(n_seq, dtype=np.int64)
    if n_seq > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=expected_ptr[1:])
    if not np.array_equal(pointers, expected_ptr):
        raise ValueError(f"{where}: sequence pointers are not contiguous in the .bin file")
    return IndexInfo(dtype, lengths, pointers, documents)


class _TokenShard:
    """The read API shared by ShardReader (local memmap) and RangeReader (byte ranges)."""

    index: IndexInfo
    where: str

    def _read(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens starting at token ``start`` of the flat .bin stream."""
        raise NotImplementedError

    def _check_bin_size(self, size: int) -> None:
        expected = self.num_tokens * self.dtype.itemsize
        if size != expected:
            raise ValueError(
                f"{self.where}: .bin is {size} bytes but the index describes "
                f"{self.num_tokens} tokens x {self.dtype.itemsize} bytes = {expected} bytes"
            )

    @property
    def dtype(self) -> np.dtype:
        return self.index.dtype

    @cached_property
    def _token_cumsum(self) -> np.ndarray:
        # cum[k] = tokens before sequence k; documents map onto sequence ranges.
        cum = np.zeros(self.index.num_sequences + 1, dtype=np.int64)
        np.cumsum(self.index.sequence_lengths, out=cum[1:])
        return cum

    @cached_property
    def document_offsets(self) -> np.ndarray:
        """Token offset of each document in the shard's flat token stream (int64)."""
        return self._token_cumsum[self.index.document_indices[:-1]]

    @cached_property
    def document_lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        docs = self.index.document_indices
        return self._token_cumsum[docs[1:]] - self._token_cumsum[docs[:-1]]

    @cached_property
    def num_tokens(self) -> int:
        return int(self._token_cumsum[-1])

    def __len__(self) -> int:
        return self.index.num_documents

    def _doc(self, i: int) -> int:
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        return i

    def __getitem__(self, i: int) -> np.ndarray:
        """All tokens of document ``i``."""
        return self.get(i)

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of document ``i`` (to its end by default)."""
        i = self._doc(i)
        doc_len = int(self.document_lengths[i])
        if length is None:
            length = doc_len - offset
        if offset < 0 or length < 0 or offset + length > doc_len:
            raise IndexError(
                f"offset {offset} + length {length} outside document {i} of {doc_len} tokens"
            )
        return self._read(int(self.document_offsets[i]) + offset, length)

    def read_tokens(self, start: int, end: int) -> np.ndarray:
        """Tokens ``[start, end)`` of the shard's flat stream, across document boundaries."""
        if not 0 <= start <= end <= self.num_tokens:
            raise IndexError(f"token range [{start}, {end}) outside 0..{self.num_tokens}")
        return self._read(start, end - start)


def parse_doc_ids(data: bytes, documents: int, where: str = "<docids>") -> list[str]:
    """The doc ids in ``.docids`` bytes, checked against the shard's document count (from its
    ``.idx``): a sidecar that does not line up with the index would misname documents."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not UTF-8 text ({e})") from None
    # Split on \n only: str.splitlines would also break ids at \x0c, \x85, \u2028 and more.
    lines = text.split("\n")
    if lines[-1]:
        raise ValueError(f"{where}: the last line has no newline; the file was cut short")
    ids = lines[:-1]
    if len(ids) != documents:
        raise ValueError(
            f"{where}: {len(ids)} doc ids for a shard of {documents} documents (.idx)"
        )
    return ids


def index_document_count(path: str | Path) -> int:
    """The document count in an ``.idx`` header, without reading the arrays."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        raise ValueError(f"{path}: {len(head)} bytes is too short for an MMIDIDX header")
    magic, _, _, _, n_doc_entries = HEADER.unpack(head)
    if magic != MAGIC or n_doc_entries < 1:
        raise ValueError(f"{path}: not a Megatron MMIDIDX index")
    return int(n_doc_entries) - 1


def read_doc_ids(path_prefix: str | Path) -> list[str] | None:
    """A local shard's doc ids in ``.idx`` order, from its ``.docids`` sidecar; None when it
    has none (written without doc ids, or by Megatron's own tools)."""
    path = docids_path(path_prefix)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_doc_ids(data, index_document_count(idx_path(path_prefix)), str(path))


class ShardReader(_TokenShard):
    """A local shard, memory-mapped. Returned arrays are read-only views of the mapping."""

    def __init__(self, path_prefix: str | Path) -> None:
        self.path_prefix = Path(path_prefix)
        ipath, bpath = idx_path(path_prefix), bin_path(path_prefix)
        self.where = str(ipath)
        if not ipath.exists() or not bpath.exists():
            raise FileNotFoundError(f"shard {path_prefix}: need both {ipath} and {bpath}")
        idx_size = ipath.stat().st_size
        if idx_size < HEADER_SIZE:
            raise ValueError(f"{ipath}: {idx_size} bytes is too short for an MMIDIDX header")
        self._idx_map = np.memmap(ipath, dtype=np.uint8, mode="r")
        self.index = parse_index(self._idx_map, self.where)
        self._check_bin_size(bpath.stat().st_size)
        # numpy cannot map an empty file; an empty shard reads from an empty array instead.
        if self.num_tokens:
            self._bin = np.memmap(bpath, dtype=self.dtype.newbyteorder("<"), mode="r")
        else:
            self._bin = np.empty(0, dtype=self.dtype)

    def _read(self, start: int, count: int) -> np.ndarray:
        return self._bin[start : start + count]


class RangeSource(Protocol):
    """A byte-addressable object: a local file, an S3 object, anything with range reads."""

    def read_range(self, start: int, end: int) -> bytes: ...  # bytes [start, end)

    def size(self) -> int: ...


class LocalRangeSource:
    """A local file served through the range API (tests, and caches on local disk)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def size(self) -> int:
        return self.path.stat().st_size

    def read_range(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)


class S3RangeSource:
    """An S3 object read by HTTP range requests through a boto3 client."""

    def __init__(self, bucket: str, key: str, client: Any) -> None:
        self.bucket = bucket
        self.key = key
        self.client = client
        self._size: int | None = None

    def size(self) -> int:
        if self._size is None:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
            self._size = int(head["ContentLength"])
        return self._size

    def read_range(self, start: int, end: int) -> bytes:
        if end <= start:
            # "bytes=a-(a-1)" is not a valid range; an empty read needs no request.
            return b""
        # HTTP ranges are inclusive at both ends.
        resp = self.client.get_object(
            Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}"
        )
        data = resp["Body"].read()
        if len(data) != end - start:
            raise OSError(
                f"s3://{self.bucket}/{self.key}: asked for bytes [{start}, {end}), "
                f"got {len(data)} bytes"
            )
        return data


class RangeReader(_TokenShard):
    """A shard read through range requests: the .idx once, whole; the .bin per request."""

    def __init__(self, idx_source: RangeSource, bin_source: RangeSource, where: str = "") -> None:
        self.where = where or repr(idx_source)
        self._bin_source = bin_source
        idx_bytes = idx_source.read_range(0, idx_source.size())
        self.index = parse_index(idx_bytes, self.where)
        self._check_bin_size(bin_source.size())

    @classmethod
    def local(cls, path_prefix: str | Path) -> RangeReader:
        return cls(
            LocalRangeSource(idx_path(path_prefix)),
            LocalRangeSource(bin_path(path_prefix)),
            where=str(idx_path(path_prefix)),
        )

    @classmethod
    def s3(cls, bucket: str, key_prefix: str, client: Any) -> RangeReader:
        return cls(
            S3RangeSource(bucket, f"{key_prefix}.idx", client),
            S3RangeSource(bucket, f"{key_prefix}.bin", client),
            where=f"s3://{bucket}/{key_prefix}.idx",
        )

    def _read(self, start: int, count: int) -> np.ndarray:
        size = self.dtype.itemsize
        data = self._bin_source.read_range(start * size, (start + count) * size)
        if len(data) != count * size:
            raise OSError(f"{self.where}: short read of {len(data)} bytes for {count} tokens")
        return np.frombuffer(data, dtype=self.dtype.newbyteorder("<"))

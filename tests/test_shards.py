"""Token shards: Megatron MMIDIDX v1 layout, atomic writes, local and range reads."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

from tokenmill.tokenize import shards
from tokenmill.tokenize.shards import (
    LocalRangeSource,
    RangeReader,
    S3RangeSource,
    ShardReader,
    ShardWriter,
    dtype_for_vocab,
    read_doc_ids,
)


def random_docs(rng, n, vocab, max_len=300):
    # Every document ends with EOS (id 0 here), as the tokenize job writes them.
    docs = []
    for _ in range(n):
        body = rng.integers(1, vocab, size=int(rng.integers(0, max_len)))
        docs.append(np.append(body, 0))
    return docs


def write_shard(prefix, docs, vocab):
    with ShardWriter(prefix, vocab) as w:
        for d in docs:
            w.add_document(d)
    return w


def parse_idx_independently(data: bytes):
    """The spec, read by hand with struct: no code shared with the module under test."""
    magic = data[:9]
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", data, 18)
    off = 34
    lengths = list(struct.unpack_from(f"<{seq_count}i", data, off))
    off += 4 * seq_count
    pointers = list(struct.unpack_from(f"<{seq_count}q", data, off))
    off += 8 * seq_count
    doc_idx = list(struct.unpack_from(f"<{doc_count}q", data, off))
    off += 8 * doc_count
    return magic, version, code, seq_count, doc_count, lengths, pointers, doc_idx, off


@pytest.mark.parametrize(
    ("vocab", "code", "dtype"),
    [(32_000, 8, np.uint16), (65_500, 4, np.int32), (128_256, 4, np.int32)],
)
def test_round_trip_and_header_fields(tmp_path, vocab, code, dtype):
    rng = np.random.default_rng(vocab)
    docs = random_docs(rng, 200, vocab)
    prefix = tmp_path / "shard-00000"
    w = write_shard(prefix, docs, vocab)
    lengths = [len(d) for d in docs]
    assert (w.documents, w.tokens) == (200, sum(lengths))
    assert w.bytes == sum(lengths) * np.dtype(dtype).itemsize
    assert w.stats.bytes == (tmp_path / "shard-00000.bin").stat().st_size

    idx = (tmp_path / "shard-00000.idx").read_bytes()
    magic, version, got_code, seqs, doc_count, got_lengths, pointers, doc_idx, end = (
        parse_idx_independently(idx)
    )
    assert magic == b"MMIDIDX\x00\x00"
    assert version == 1
    assert got_code == code
    assert seqs == 200
    assert doc_count == 201  # Megatron's document_indices: [0, 1, ..., 200]
    assert got_lengths == lengths
    itemsize = np.dtype(dtype).itemsize
    assert pointers == [sum(lengths[:i]) * itemsize for i in range(200)]
    assert doc_idx == list(range(201))
    assert end == len(idx)

    bin_bytes = (tmp_path / "shard-00000.bin").read_bytes()
    assert bin_bytes == np.concatenate(docs).astype(np.dtype(dtype).newbyteorder("<")).tobytes()

    for reader in (ShardReader(prefix), RangeReader.local(prefix)):
        assert len(reader) == 200
        assert reader.dtype == np.dtype(dtype)
        assert reader.num_tokens == sum(lengths)
        assert reader.document_lengths.tolist() == lengths
        for i in (0, 1, 57, 199, -1):
            np.testing.assert_array_equal(reader[i], docs[i])
        np.testing.assert_array_equal(reader.get(57, offset=2, length=5), docs[57][2:7])
        np.testing.assert_array_equal(reader.get(57, offset=3), docs[57][3:])
        np.testing.assert_array_equal(
            reader.read_tokens(10, 1000), np.concatenate(docs)[10:1000]
        )
        with pytest.raises(IndexError):
            reader[200]
        with pytest.raises(IndexError):
            reader.get(0, offset=0, length=lengths[0] + 1)


def test_dtype_for_vocab_cutoff():
    assert dtype_for_vocab(50_257) == np.uint16
    assert dtype_for_vocab(65_499) == np.uint16
    assert dtype_for_vocab(65_500) == np.int32
    assert dtype_for_vocab(151_936) == np.int32


def test_exception_in_with_block_leaves_no_files(tmp_path):
    prefix = tmp_path / "shard"
    with pytest.raises(RuntimeError):
        with ShardWriter(prefix, 1000) as w:
            w.add_document([1, 2, 3, 0])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_old_shard(tmp_path):
    prefix = tmp_path / "shard"
    write_shard(prefix, [np.array([5, 6, 0])], 1000)
    with pytest.raises(RuntimeError):
        with ShardWriter(prefix, 1000) as w:
            w.add_document([7, 0])
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.bin", "shard.idx"]
    np.testing.assert_array_equal(ShardReader(prefix)[0], [5, 6, 0])


def test_out_of_range_and_bad_documents_rejected(tmp_path):
    with ShardWriter(tmp_path / "s", 65_000) as w:
        with pytest.raises(ValueError, match="token ids"):
            w.add_document([1, 65_000])
        with pytest.raises(ValueError, match="token ids"):
            w.add_document([-1, 0])
        with pytest.raises(ValueError, match="EOS"):
            w.add_document([])
        with pytest.raises(ValueError, match="integers"):
            w.add_document(np.array([1.5, 0.0]))
        w.add_document([64_999, 0])
    assert ShardReader(tmp_path / "s")[0].tolist() == [64_999, 0]


def test_empty_shard(tmp_path):
    write_shard(tmp_path / "empty", [], 1000)
    r = ShardReader(tmp_path / "empty")
    assert len(r) == 0 and r.num_tokens == 0


def test_corrupted_bin_size_is_a_clear_error(tmp_path):
    prefix = tmp_path / "shard"
    write_shard(prefix, random_docs(np.random.default_rng(1), 10, 1000), 1000)
    with open(tmp_path / "shard.bin", "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(ValueError, match=r"\.bin is .* bytes but the index describes"):
        ShardReader(prefix)
    with pytest.raises(ValueError, match=r"\.bin is .* bytes"):
        RangeReader.local(prefix)


def test_bad_magic_and_version(tmp_path):
    prefix = tmp_path / "shard"
    write_shard(prefix, [np.array([1, 0])], 1000)
    idx = tmp_path / "shard.idx"
    good = idx.read_bytes()
    idx.write_bytes(b"XXIDIDX\x00\x00" + good[9:])
    with pytest.raises(ValueError, match="bad magic"):
        ShardReader(prefix)
    idx.write_bytes(good[:9] + struct.pack("<Q", 2) + good[17:])
    with pytest.raises(ValueError, match="version 2"):
        ShardReader(prefix)
    idx.write_bytes(good[:-8])
    with pytest.raises(ValueError, match="does not match the header"):
        ShardReader(prefix)


class FakeS3Client:
    """Serves get_object/head_object from local files: a stand-in for boto3's client."""

    def __init__(self, root):
        self.root = root
        self.ranges = []

    def head_object(self, Bucket, Key):  # noqa: N803 - boto3's argument names
        return {"ContentLength": (self.root / Bucket / Key).stat().st_size}

    def get_object(self, Bucket, Key, Range):  # noqa: N803
        assert Range.startswith("bytes=")
        a, b = (int(x) for x in Range[len("bytes=") :].split("-"))
        self.ranges.append((Key, a, b))
        data = (self.root / Bucket / Key).read_bytes()[a : b + 1]  # inclusive, like HTTP
        return {"Body": io.BytesIO(data)}


def test_s3_range_reader_with_fake_client(tmp_path):
    (tmp_path / "bucket" / "tok").mkdir(parents=True)
    docs = random_docs(np.random.default_rng(7), 50, 100_000)
    write_shard(tmp_path / "bucket" / "tok" / "cc-00001", docs, 100_000)
    client = FakeS3Client(tmp_path)
    reader = RangeReader.s3("bucket", "tok/cc-00001", client)
    assert len(reader) == 50 and reader.dtype == np.int32
    for i in range(50):
        np.testing.assert_array_equal(reader[i], docs[i])
    # Ranges are in bytes and inclusive: document 3 is exactly its byte span.
    start = sum(len(d) for d in docs[:3]) * 4
    assert ("tok/cc-00001.bin", start, start + len(docs[3]) * 4 - 1) in client.ranges
    assert S3RangeSource("bucket", "tok/cc-00001.bin", client).read_range(8, 8) == b""


def test_local_range_source_reads_bytes(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(100)))
    src = LocalRangeSource(p)
    assert src.size() == 100
    assert src.read_range(10, 13) == bytes([10, 11, 12])


def test_reads_megatron_files_with_multi_sequence_documents(tmp_path):
    # Megatron's builder can put several sequences in one document: doc_idx = [0, 2, 3].
    seqs = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8, 9])]
    lengths = [len(s) for s in seqs]
    pointers = [0, 6, 10]  # bytes, uint16
    idx = (
        b"MMIDIDX\x00\x00"
        + struct.pack("<QBQQ", 1, 8, 3, 3)
        + struct.pack("<3i", *lengths)
        + struct.pack("<3q", *pointers)
        + struct.pack("<3q", 0, 2, 3)
    )
    (tmp_path / "m.idx").write_bytes(idx)
    (tmp_path / "m.bin").write_bytes(np.concatenate(seqs).astype("<u2").tobytes())
    r = ShardReader(tmp_path / "m")
    assert len(r) == 2
    assert r.document_lengths.tolist() == [5, 4]
    assert r[0].tolist() == [1, 2, 3, 4, 5] and r[1].tolist() == [6, 7, 8, 9]


# --------------------------------------------------------------------------------------------
# The .docids sidecar


def test_docids_sidecar_round_trip(tmp_path):
    ids = ["cc-000", "wikipedia-ü-東京", "x" * 300]
    prefix = tmp_path / "shard"
    with ShardWriter(prefix, 1000) as w:
        for i, doc_id in enumerate(ids):
            w.add_document([i + 1, 0], doc_id)
    assert w.stats.docids_path == tmp_path / "shard.docids"
    assert (tmp_path / "shard.docids").read_bytes() == "".join(
        f"{d}\n" for d in ids).encode("utf-8")
    assert read_doc_ids(prefix) == ids
    # Without doc ids there is no sidecar, and rewriting the prefix removes the old one: its
    # ids would misname the new documents.
    write_shard(prefix, [np.array([9, 0])], 1000)
    assert read_doc_ids(prefix) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.bin", "shard.idx"]


def test_docids_sidecar_is_renamed_before_the_index(tmp_path, monkeypatch):
    renamed = []
    real_replace = shards.os.replace

    def recording_replace(src, dst):
        renamed.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(shards.os, "replace", recording_replace)
    with ShardWriter(tmp_path / "s", 1000) as w:
        w.add_document([1, 0], "a")
    assert renamed == ["s.bin", "s.docids", "s.idx"]


def test_docids_temporaries_go_with_an_aborted_shard(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path / "s", 1000) as w:
            w.add_document([1, 0], "a")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_bad_doc_ids_rejected(tmp_path):
    with ShardWriter(tmp_path / "s", 1000) as w:
        for bad in ("a\nb", "a\r"):
            with pytest.raises(ValueError, match="line break"):
                w.add_document([1, 0], bad)
        w.add_document([1, 0], "a")
        with pytest.raises(ValueError, match="every document or for none"):
            w.add_document([2, 0])
    assert read_doc_ids(tmp_path / "s") == ["a"]
    with ShardWriter(tmp_path / "t", 1000) as w:
        w.add_document([1, 0])
        with pytest.raises(ValueError, match="every document or for none"):
            w.add_document([2, 0], "b")


def test_read_doc_ids_checks_the_index(tmp_path):
    prefix = tmp_path / "s"
    with ShardWriter(prefix, 1000) as w:
        for doc_id in ("a", "b", "c"):
            w.add_document([1, 0], doc_id)
    sidecar = tmp_path / "s.docids"
    sidecar.write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"s\.docids: 2 doc ids for a shard of 3 documents"):
        read_doc_ids(prefix)
    sidecar.write_text("a\nb\nc")  # cut short: no final newline
    with pytest.raises(ValueError, match=r"s\.docids: the last line has no newline"):
        read_doc_ids(prefix)
    sidecar.write_text("a\nb\nc\nd\n")
    with pytest.raises(ValueError, match="4 doc ids"):
        read_doc_ids(prefix)

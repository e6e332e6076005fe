from __future__ import annotations

import gzip

import pytest

from tokenmill.jobs.config import IngestConfig
from tokenmill.jobs.ingest import resolve_inputs
from tokenmill.jobs.lakeio import is_s3, open_at, split_s3


def test_glob_list_and_common_crawl_paths(tmp_path):
    for name in ("b.warc.gz", "a.warc.gz", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert resolve_inputs(str(tmp_path / "*.warc.gz"), IngestConfig()) == [
        str(tmp_path / "a.warc.gz"), str(tmp_path / "b.warc.gz")
    ]
    listing = tmp_path / "inputs.lst"
    listing.write_text(f"# comment\n{tmp_path / 'b.warc.gz'}\n\n{tmp_path / 'a.warc.gz'}\n")
    assert resolve_inputs(str(listing), IngestConfig()) == [
        str(tmp_path / "b.warc.gz"), str(tmp_path / "a.warc.gz")
    ]
    assert resolve_inputs(f"@{listing}", IngestConfig()) == resolve_inputs(
        str(listing), IngestConfig()
    )
    cc = tmp_path / "warc.paths.gz"
    cc.write_bytes(gzip.compress(b"crawl-data/CC-MAIN-2024-10/segments/1/warc/x.warc.gz\n"))
    assert resolve_inputs(str(cc), IngestConfig()) == [
        "s3a://commoncrawl/crawl-data/CC-MAIN-2024-10/segments/1/warc/x.warc.gz"
    ]
    local = IngestConfig(cc_url_prefix=str(tmp_path))
    assert resolve_inputs(str(cc), local)[0].startswith(str(tmp_path) + "/crawl-data/")
    with pytest.raises(FileNotFoundError):
        resolve_inputs(str(tmp_path / "missing.txt"), IngestConfig())


def test_open_at_offset_and_s3_urls(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"0123456789")
    with open_at(str(f), 4) as s:
        assert s.read() == b"456789"
    with open_at(f"file://{f}", 8) as s:
        assert s.read() == b"89"
    assert is_s3("s3a://bucket/a/b") and not is_s3("/tmp/x")
    assert split_s3("s3a://bucket/a/b.warc.gz") == ("bucket", "a/b.warc.gz")

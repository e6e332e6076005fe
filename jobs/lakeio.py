"""Where bytes come from: local paths and s3a:// URLs, for the driver (listing inputs) and for
Spark tasks (opening one input file at an offset). Credentials come only from the standard AWS
chain (environment, profile, instance role); none is ever read from config or logged."""

from __future__ import annotations

import glob as globlib
import gzip
import io
import os
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

_S3_SCHEMES = ("s3a://", "s3://", "s3n://")


def is_s3(path: str) -> bool:
    return path.startswith(_S3_SCHEMES)


def split_s3(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def local_path(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


@lru_cache(maxsize=1)
def s3_client() -> Any:
    import boto3
    from botocore.config import Config

    # Adaptive retries back off on 503 SlowDown and on connection errors. The endpoint comes
    # from AWS_ENDPOINT_URL (or the profile) like every other AWS setting.
    return boto3.client("s3", config=Config(retries={"max_attempts": 10, "mode": "adaptive"}))


class _S3RangeStream(io.RawIOBase):
    """A forward-only reader over one S3 object from an offset (a single ranged GET)."""

    def __init__(self, bucket: str, key: str, offset: int) -> None:
        resp = s3_client().get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-")
        self._body = resp["Body"]

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._body.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


def open_at(path: str, offset: int) -> IO[bytes]:
    if is_s3(path):
        bucket, key = split_s3(path)
        size = file_size(path)
        if offset >= size:
            return io.BytesIO(b"")
        return io.BufferedReader(_S3RangeStream(bucket, key, offset), buffer_size=1 << 20)
    f = open(local_path(path), "rb")  # noqa: SIM115 - the caller closes it
    f.seek(offset)
    return f


def file_size(path: str) -> int:
    if is_s3(path):
        bucket, key = split_s3(path)
        return int(s3_client().head_object(Bucket=bucket, Key=key)["ContentLength"])
    return os.path.getsize(local_path(path))


def read_bytes(path: str) -> bytes:
    with open_at(path, 0) as f:
        return f.read()


def expand_glob(pattern: str) -> list[str]:
    """Paths matching a glob, sorted. Local patterns give absolute paths so that the ledger
    names a file the same way whatever the working directory was."""
    if is_s3(pattern):
        bucket, key = split_s3(pattern)
        scheme = pattern.split("://", 1)[0]
        prefix = key.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        import fnmatch

        out = []
        paginator = s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if fnmatch.fnmatchcase(obj["Key"], key):
                    out.append(f"{scheme}://{bucket}/{obj['Key']}")
        return sorted(out)
    return sorted(str(Path(p).resolve()) for p in globlib.glob(local_path(pattern)))


def read_path_list(path: str, prefix: str = "") -> list[str]:
    """A list file: one path per line (`#` comments allowed), gzip or plain. Common Crawl's
    warc.paths.gz holds paths relative to its bucket, joined here to `prefix`."""
    data = read_bytes(path)
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    out = []
    for line in data.decode("utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if prefix and "://" not in line and not line.startswith("/"):
            line = prefix.rstrip("/") + "/" + line
        elif not is_s3(line) and "://" not in line:
            line = str(Path(local_path(line)).resolve())
        out.append(line)
    return out

"""Shared fixtures: one real Spark session (local[2], Delta) for the whole test run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_SAMPLES = REPO.parent / "shared" / "data" / "warc-samples"
VENV_BIN = Path(sys.executable).parent

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("TOKENMILL_MASTER", "local[2]")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# spark-submit (used by the CLI tests) looks for its Python on PATH.
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"

# Data-quality gates add a Great Expectations pass to every job run; the many small job runs
# here go without it, and the gate tests (test_gates*.py) switch it back on.
os.environ.setdefault("TOKENMILL_GATES", "off")
TEST_SPARK_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


@pytest.fixture(scope="session")
def spark():
    from tokenmill.jobs.config import PipelineConfig, SparkConfig
    from tokenmill.jobs.runtime import build_session

    session = build_session("tokenmill-tests", PipelineConfig(spark=SparkConfig(TEST_SPARK_CONF)))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sample_crawl(tmp_path_factory):
    """The default sample crawl (3 files), generated once."""
    from tokenmill.jobs.sample_crawl import write_sample_crawl

    out = tmp_path_factory.mktemp("sample-crawl")
    summary = write_sample_crawl(out)
    return out, summary


def shared_sample(name: str) -> Path:
    path = SHARED_SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} not present (real WARC samples live beside the repo)")
    return path

"""The repository's shape: one import namespace, no shadowed standard library, jars in step."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def test_import_tokenize_from_repo_root_is_the_standard_library():
    # Run from the repo root, where the tokenize/ folder sits on sys.path[0] ('').
    for python in ("python3", sys.executable):
        out = subprocess.run(
            [python, "-c", "import tokenize, sys; print(tokenize.__file__); tokenize.open"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert not out.startswith(str(REPO)), out
        assert out.endswith("tokenize.py")


def test_namespace_maps_every_top_level_folder():
    import tokenmill.dedup
    import tokenmill.jobs.runtime
    import tokenmill.schemas.tables
    import tokenmill.tokenize
    import tokenmill.udfs.warc

    assert tokenmill.jobs.runtime.__file__.startswith(str(REPO / "jobs"))
    assert tokenmill.udfs.warc.__file__.startswith(str(REPO / "udfs"))
    assert tokenmill.schemas.tables.__file__.startswith(str(REPO / "schemas"))
    assert str(REPO / "tokenize") in list(tokenmill.tokenize.__path__)
    assert str(REPO / "dedup") in list(tokenmill.dedup.__path__)


def test_required_top_level_entries_exist():
    for name in ("pyproject.toml", "jobs", "udfs", "dedup", "tokenize", "schemas", "infra",
                 "tests", "Makefile", "README.md", ".ci/run"):
        assert (REPO / name).exists(), name
    # A tokenize/__init__.py would make the folder shadow the standard library.
    assert not (REPO / "tokenize" / "__init__.py").exists()


def test_cluster_packages_match_the_pom():
    pom = (REPO / "infra/jvm/pom.xml").read_text()
    deps = re.findall(
        r"<dependency>\s*<groupId>([^<]+)</groupId>\s*<artifactId>([^<]+)</artifactId>\s*"
        r"<version>([^<]+)</version>",
        pom,
    )
    from_pom = {f"{g}:{a}:{v}" for g, a, v in deps}
    listed = {
        line.strip()
        for line in (REPO / "infra/spark/packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert from_pom == listed


def test_delta_jar_matches_the_python_wheel():
    from importlib.metadata import version

    pom = (REPO / "infra/jvm/pom.xml").read_text()
    jar_version = re.search(r"delta-spark_[^<]+</artifactId>\s*<version>([^<]+)<", pom).group(1)
    assert version("delta-spark") == jar_version
    assert version("pyspark").startswith("4.2")

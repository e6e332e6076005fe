"""The report job on real Spark and Delta over a small hand-written lake: every section renders,
the funnel and the $ per million tokens equal hand counts, crawled strings are escaped, a lake
with nothing in it says "not run yet", and a real headless Chromium paints the page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import TEST_SPARK_CONF
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from tokenmill.jobs import report
from tokenmill.schemas.tables import (
    DOCS,
    DUP_CLUSTERS,
    LANGID_SIGNALS,
    QUALITY_SIGNALS,
    REJECTIONS,
    RUNS,
    signals_table,
)

SETS = [f"--set=spark.conf={json.dumps(TEST_SPARK_CONF)}"]
SCRIPT = "<script>alert(1)</script>"
PRICE = 0.08  # $ per core-hour passed on the command line
# Documents kept by each stage (doc ids d00 … d09): the funnel must show exactly these.
KEPT = {"docs": 10, "langid": 8, "urlfilter": 7, "quality": 6, "deduped": 5, "clean": 5}
TOKENS = {"cc": (4, 1_500_000), "wikipedia": (1, 500_000)}  # source -> (documents, tokens)
# Last succeeded run of each job → its cpu_seconds; an earlier ingest run (7200 s) and a
# later failed quality run must not be counted.
CPU = {"ingest": 3600.0, "langid": 1800.0, "urlfilter": 900.0, "quality": 1800.0,
       "dedup": 720.0, "pii": 360.0, "tokenize_shards": 720.0}


def text_of(i: int) -> str:
    if i == 9:
        return f"{SCRIPT} Buy cheap pills now & save <b>big</b> " * 3
    return f"Document {i} about rivers and the sea. " * (3 + 20 * i) + "ü"


def url_of(i: int) -> str:
    return f"https://evil.example/?q={SCRIPT}" if i == 9 else f"https://example.com/page/{i}"


def write_tables(spark, root: Path, tables: dict[str, tuple[list, object]]) -> None:
    """Writes the Delta tables concurrently: on a small lake each write is mostly Delta log
    I/O and planning on the driver, so threads cut the fixture's time."""
    def save(name: str) -> None:
        rows, schema = tables[name]
        spark.createDataFrame(rows, schema).write.format("delta").save(f"{root}/{name}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(save, tables))


def runs_schema() -> StructType:
    """RUNS, plus the columns other jobs are adding where the schema does not have them yet."""
    fields = list(RUNS.schema.fields)
    have = {f.name for f in fields}
    for name, kind in (("cpu_seconds", DoubleType()), ("gate_status", StringType()),
                       ("gate_summary", StringType())):
        if name not in have:
            fields.append(StructField(name, kind, True))
    return StructType(fields)


def run_row(job, n, status="succeeded", cpu=None, rows=(None, None), counts=None, error=None,
            gate=(None, None)):
    start = datetime(2026, 11, 1, 8, 0) + timedelta(hours=n)
    return {"job": job, "run_id": f"{job}-{n:02d}", "status": status, "input_table": None,
            "input_version": None, "output_table": None, "output_version": None,
            "rows_in": rows[0], "rows_out": rows[1], "counts": counts or {}, "config_hash": "h",
            "started_at": start, "ended_at": start + timedelta(seconds=30 + n), "error": error,
            "cpu_seconds": cpu, "gate_status": gate[0], "gate_summary": gate[1]}


def build_lake(spark, root: Path) -> None:
    docs = []
    for i in range(10):
        text = text_of(i)
        docs.append({"doc_id": f"d{i:02d}", "source": "cc", "url": url_of(i), "text": text,
                     "text_length": len(text), "text_hash": f"h{i}", "run_id": "ingest-02"})
    tables: dict[str, tuple[list, object]] = {"docs": (docs, DOCS.schema)}
    stage_schema = "doc_id string, source string, url string, text string"
    for name, n in KEPT.items():
        if name != "docs":
            tables[name] = ([(d["doc_id"], d["source"], d["url"], d["text"]) for d in docs[:n]],
                            stage_schema)
    tables["langid_signals"] = ([
        {"doc_id": f"d{i:02d}", "input_hash": "x", "signals_key": "k", "lang": "en",
         "lang_score": 0.05 + 0.1 * i, "run_id": "langid-03"} for i in range(10)],
        signals_table("langid", LANGID_SIGNALS).schema)
    tables["quality_signals"] = ([
        {"doc_id": f"d{i:02d}", "input_hash": "x", "signals_key": "k",
         "perplexity": None if i == 0 else 30.0 * 2 ** i, "run_id": "quality-05"}
        for i in range(7)], signals_table("quality", QUALITY_SIGNALS).schema)
    rejected = [("x01", "https://example.com/404", "ingest", "http_status", None),
                ("d08", url_of(8), "langid", "lang_not_target", {"lang": "fr"}),
                ("d09", url_of(9), "langid", "lang_low_score", {"lang_score": SCRIPT}),
                ("d07", url_of(7), "urlfilter", "blocked_domain", {"url_match": "example.com"}),
                ("d06", url_of(6), "quality", "gopher_dup_line_fraction", None),
                ("d05", url_of(5), "dedup", "near_duplicate", {"representative": "d04"})]
    tables["rejections"] = ([
        {"doc_id": d, "url": u, "stage": s, "reason": r, "signals": sig, "run_id": "r"}
        for d, u, s, r, sig in rejected], REJECTIONS.schema)
    tables["dup_clusters"] = ([
        {"doc_id": "d04", "cluster_id": "d04", "representative": "d04", "cluster_size": 2,
         "kind": "representative", "similarity": None, "run_id": "dedup-06"},
        {"doc_id": "d05", "cluster_id": "d04", "representative": "d04", "cluster_size": 2,
         "kind": "near", "similarity": "0.91", "run_id": "dedup-06"}], DUP_CLUSTERS.schema)
    tables["runs"] = ([
        run_row("ingest", 1, cpu=7200.0, rows=(12, 10)),
        run_row("ingest", 2, cpu=CPU["ingest"], rows=(11, 10)),
        run_row("langid", 3, cpu=CPU["langid"], rows=(10, 8)),
        run_row("urlfilter", 4, cpu=CPU["urlfilter"], rows=(8, 7)),
        run_row("quality", 5, cpu=CPU["quality"], rows=(7, 6),
                gate=("passed", "quality: 6 rows, 0 null ids")),
        run_row("quality", 6, status="failed", cpu=50.0, error=f"boom {SCRIPT}",
                gate=("failed", f"lang outside target set: {SCRIPT}")),
        run_row("dedup", 7, cpu=CPU["dedup"], rows=(6, 5)),
        run_row("pii", 8, cpu=CPU["pii"], rows=(5, 5),
                counts={"email_address": 3, "phone_number": 2, "masked": 5, "docs_masked": 2}),
        run_row("tokenize_shards", 9, cpu=CPU["tokenize_shards"], rows=(5, 5)),
    ], runs_schema())
    write_tables(spark, root, tables)
    manifest = {
        "tokenizer": {"path": "../tokenizer/t.model", "sha256": "ab" * 32, "vocab_size": 32000,
                      "eos_id": 2},
        "sources": {s: {"documents": d, "tokens": t, "weight": w}
                    for (s, (d, t)), w in zip(TOKENS.items(), (0.9, 0.1), strict=True)},
        "weights": {"cc": 0.9, "wikipedia": 0.1},
        "shards": [{"path": f"r/{s}/part-00000", "source": s, "documents": d, "tokens": t,
                    "dtype": "uint16", "idx_sha256": None} for s, (d, t) in TOKENS.items()],
        "inputs": {"clean": 0}, "created_at": "2026-11-01T17:00:00+00:00", "seed": 1,
        "version": 1,
    }
    (root / "shards").mkdir()
    (root / "shards" / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def full(spark, tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("report-lake")
    build_lake(spark, root)
    code = report.main(["--root", str(root), "--run-id", "report-t1",
                        "--core-hour-usd", str(PRICE), *SETS])
    assert code == 0
    page = root / "_reports" / "report-t1.html"
    return page, page.read_text("utf-8")


def section(page: str, anchor: str) -> str:
    m = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert m, f"section {anchor} missing"
    return m.group(1)


def test_every_section_renders(full):
    path, page = full
    assert (path.parent / "latest.html").read_text("utf-8") == page
    for anchor, _, _ in report.SECTIONS:
        assert report.NOT_RUN not in section(page, anchor), anchor
    assert page.count("<svg") >= 10
    assert "email_address" in section(page, "pii") and "near" in section(page, "clusters")
    assert "passed" in section(page, "gates") and "ingest: rows out" in section(page, "trends")
    # Self-contained: nothing to fetch (the only URL-like text is SVG's namespace and lake data).
    assert not re.search(r'\b(src|href)\s*=\s*"(?!#)', page)
    assert "<link" not in page and "@import" not in page


def test_runs_ledger_records_the_report(spark, full):
    path, _ = full
    row = spark.read.format("delta").load(f"{path.parent.parent}/runs") \
        .where("run_id = 'report-t1'").collect()[0]
    assert row["status"] == "succeeded" and row["counts"]["sections_not_run"] == 0


def test_crawled_strings_are_escaped(full):
    _, page = full
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section(page, "drops")
    assert "boom &lt;script&gt;" in section(page, "trends")
    assert "<script" not in page.lower()
    sample = section(page, "drops")
    assert "https://evil.example/?q=&lt;script&gt;" in sample  # the url column
    assert "Buy cheap pills now &amp; save &lt;b&gt;big&lt;/b&gt;" in sample  # the text sample


def test_funnel_equals_table_counts(full):
    _, page = full
    funnel = section(page, "funnel")
    for name, n in KEPT.items():
        row = re.search(rf'<tr data-stage="{name}">(.*?)</tr>', funnel, re.S).group(1)
        docs = int(re.search(r'<span class="docs">([\d,]+)</span>', row).group(1)
                   .replace(",", ""))
        text_bytes = int(re.search(r'<span class="bytes">([\d,]+)</span>', row).group(1)
                         .replace(",", ""))
        assert docs == n, name
        assert text_bytes == sum(len(text_of(i).encode("utf-8")) for i in range(n)), name
    # Rows in/out come from the run that wrote the table, not from the later failed one.
    quality = re.search(r'<tr data-stage="quality">(.*?)</tr>', funnel, re.S).group(1)
    assert re.search(r'<td class="num">7</td><td class="num">6</td>', quality)
    assert "last run" in quality and "failed" in quality
    shards = re.search(r'<tr data-stage="shards">(.*?)</tr>', funnel, re.S).group(1)
    assert f'<span class="docs">{sum(d for d, _ in TOKENS.values())}</span>' in shards


def test_usd_per_million_tokens(full):
    _, page = full
    usd = sum(CPU.values()) / 3600 * PRICE  # 9900 CPU-seconds = 2.75 core-hours
    per_million = usd / (sum(t for _, t in TOKENS.values()) / 1e6)
    got = float(re.search(r'id="usd-per-mtok" data-value="([^"]+)"', page).group(1))
    assert got == pytest.approx(per_million, rel=1e-9) and got == pytest.approx(0.11)


def test_missing_tables_say_not_run_yet(spark, tmp_path):
    # The job path (run_job, --out) is covered above; here only what an empty lake reads as.
    data = report.gather(spark, str(tmp_path), "report-empty", report.DEFAULT_CORE_HOUR_USD)
    page = report.render_report(data)
    for anchor, _, _ in report.SECTIONS:
        assert report.NOT_RUN in section(page, anchor), anchor
    assert section(page, "histograms").count(report.NOT_RUN) == 4
    assert data.versions == {} and list(tmp_path.iterdir()) == []  # read only


def test_charts_are_wellformed_svg_with_escaped_labels():
    labels = [f"langid: {SCRIPT}", "a & b"]
    svgs = [
        report.bar_chart(labels, {"x": [3, None], "y": [1.5, 2]}, title=SCRIPT, x_label="n"),
        report.histogram([(1, 10, 4), (10, 100, 0), (100, 1000, 7)], title="h", x_label="c",
                         log_x=True),
        report.histogram([], title="empty", x_label="c"),
        report.line_chart(["a", "b", "c"], {"rows": [1, None, 3]}, title=SCRIPT, x_label="run",
                          y_label="rows"),
    ]
    for svg in svgs:
        ET.fromstring(svg)  # well-formed XML: every label escaped
        assert "<script" not in svg
    assert report.nice_ticks(0, 7) == [0, 2, 4, 6, 8]


# --------------------------------------------------------------------------- a real browser


def distinct_colours(png: Path) -> int:
    """Distinct pixel colours of a PNG: Pillow where installed, else a small pure-Python
    decoder (8-bit, non-interlaced truecolour as Chromium writes)."""
    try:
        from PIL import Image
    except ImportError:
        return _distinct_colours_pure(png.read_bytes())
    with Image.open(png) as img:
        return len(img.convert("RGB").getcolors(maxcolors=1 << 24) or [])


def _distinct_colours_pure(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, colour_type, interlace = header[8], header[9], header[12]
    assert depth == 8 and interlace == 0 and colour_type in (2, 6), header
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(bytes(idat)), width * bpp
    prev, colours = bytearray(stride), set()
    for y in range(height):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(row[i:i + 3]) for i in range(0, stride, bpp))
        prev = row
    return len(colours)


def test_headless_chromium_paints_the_report(full, tmp_path):
    path, _ = full
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium not installed: `make system-deps` installs it from Debian"
    png = tmp_path / "report.png"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1200,2000", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert png.exists() and png.stat().st_size > 0, proc.stderr[-2000:]
    assert distinct_colours(png) > 10


def test_s3a_targets_are_uploaded_from_a_local_file(monkeypatch, tmp_path):
    uploaded = {}

    def put_file(spark, local, dest):
        uploaded[dest] = Path(local).read_text("utf-8")

    monkeypatch.setattr(report, "put_file", put_file)
    ctx = SimpleNamespace(spark=None, run_id="report-r", args=SimpleNamespace(out=None),
                          path=lambda name: f"s3a://bucket/lake/{name}")
    assert report.publish(ctx, "<p>page</p>") == [
        "s3a://bucket/lake/_reports/report-r.html", "s3a://bucket/lake/_reports/latest.html"]
    assert uploaded == dict.fromkeys(uploaded, "<p>page</p>") and len(uploaded) == 2
    ctx.args.out = str(tmp_path / "r.html")  # a local --out is written directly
    report.publish(ctx, "<p>local</p>")
    assert (tmp_path / "r.html").read_text("utf-8") == "<p>local</p>" and len(uploaded) == 2

"""The pipeline report: one self-contained HTML page that shows what the lake holds and why.

    spark-submit jobs/report.py --root lake [--out FILE] [--core-hour-usd 0.05]
    python -m tokenmill.jobs.report --root lake

Writes `<root>/_reports/<run_id>.html` and `<root>/_reports/latest.html` (or only
--out). An s3a root gets the page written locally, then uploaded through Hadoop's FileSystem.
The page has, in order:

- the **funnel**: documents and UTF-8 text bytes in each stage's table (current Delta version)
  in pipeline order, beside the rows in/out its job's last run recorded in `runs`;
- **drop reasons** from `rejections` per stage and reason, and a sample of dropped documents
  (url, reason, deciding signals, the first 200 characters of the ingested text);
- **histograms**: language-ID score, perplexity, document length (ingested and kept);
- **duplicate clusters** by size; **PII** masks per type (the `pii` run's counts);
- **tokens per source** against the target mixture (`shards/manifest.json`);
- **cost**: executor CPU-hours of each job's last run (`runs.cpu_seconds`, where recorded)
  priced at --core-hour-usd, and $ per million output tokens;
- **trends** of rows out and duration over each job's runs, and **gates** per run.

Everything is aggregated in Spark; the driver collects only aggregates whose size is bounded
by the number of stages, reasons, buckets and runs, never by the corpus. A table that does not
exist yet is shown as "not run yet". Every string that comes from the lake (URLs, reasons,
texts, errors, even job names) goes through `html.escape`; the charts are inline SVG written
here, the styles inline CSS, and a Content-Security-Policy forbids scripts and any external
load, so the page opens offline and a crawled `<script>` can only ever be text.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenmill.jobs.runtime import (
    JobContext,
    delta_version,
    job_parser,
    path_exists,
    put_file,
    read_small_text,
    run_job,
    table_path,
)
from tokenmill.jobs.tokenize_shards import MANIFEST, SHARDS_DIR
from tokenmill.schemas.tables import (
    CLEAN_NAME,
    DEDUPED_NAME,
    DOCS,
    DUP_CLUSTERS,
    LANGID_NAME,
    PII_SIGNALS,
    QUALITY_NAME,
    REJECTIONS,
    RUNS,
    URLFILTER_NAME,
)

JOB = "report"
REPORTS_DIR = "_reports"
LATEST = "latest.html"
DEFAULT_CORE_HOUR_USD = 0.05
NOT_RUN = "not run yet"

# The funnel in pipeline order: (table, the job that writes it). The last row is the token
# shards, counted from the manifest.
FUNNEL: tuple[tuple[str, str], ...] = (
    (DOCS.name, "ingest"),
    (LANGID_NAME, "langid"),
    (URLFILTER_NAME, "urlfilter"),
    (QUALITY_NAME, "quality"),
    (DEDUPED_NAME, "dedup"),
    (CLEAN_NAME, "pii"),
    (SHARDS_DIR, "tokenize_shards"),
)
STAGE_ORDER = tuple(job for _, job in FUNNEL)
LANGID_SIGNALS_NAME = f"{LANGID_NAME}_signals"
QUALITY_SIGNALS_NAME = f"{QUALITY_NAME}_signals"
LANG_SCORE = "lang_score"
PERPLEXITY = "perplexity"
# PII types as the pii job counts them in runs.counts (pii_email_address → email_address).
PII_TYPES = tuple(n.removeprefix("pii_") for n, _ in PII_SIGNALS if n != "pii_masked")
# Columns other people add to `runs`; read where present.
CPU_SECONDS, GATE_STATUS, GATE_SUMMARY = "cpu_seconds", "gate_status", "gate_summary"
TASK_SECONDS = "task_seconds"  # core-seconds tasks occupied (Python workers included)
RUNS_PER_JOB = 50  # trend points per job: the runs ledger grows with runs, not with data
SAMPLES_PER_REASON, MAX_SAMPLES = 2, 60
SAMPLE_CHARS = 200
LENGTH_BINS_PER_DECADE = 4  # log-scale length and perplexity buckets: 4 per factor of ten
SCORE_BINS = 20
READ_THREADS = 4  # concurrent Spark jobs reading the lake


# =========================================================================== formatting


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WHITESPACE = re.compile(r"[ \t\r\f\v]+")


def esc(value: Any) -> str:
    """Text for HTML or SVG: escaped (quotes too, so it is safe in attributes), with control
    characters a crawl may carry shown as U+FFFD rather than passed to the parser."""
    return html.escape(_CONTROL.sub("\ufffd", "" if value is None else str(value)), quote=True)


def fmt_int(v: float | None) -> str:
    return "n/a" if v is None else f"{int(round(v)):,}"


def fmt_compact(v: float | None) -> str:
    """1234 → 1.2k, 2.5e6 → 2.5M; small numbers keep 3 significant digits."""
    if v is None:
        return "n/a"
    a = abs(v)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "n/a"
    # Decimal units, as crawl and dataset sizes are quoted (and so axis ticks stay round).
    for div, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(v) >= div:
            return f"{v / div:.3g} {unit}"
    return f"{int(v)} B"


def fmt_pct(part: float | None, whole: float | None) -> str:
    if part is None or not whole:
        return "n/a"
    return f"{100 * part / whole:.1f}%"


def fmt_usd(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"${v:,.2f}" if abs(v) >= 1 else f"${v:.4g}"


def fmt_seconds(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v < 120:
        return f"{v:.1f}s"
    return f"{v / 60:.1f}min" if v < 7200 else f"{v / 3600:.1f}h"


def fmt_time(t: datetime | None) -> str:
    return "n/a" if t is None else t.strftime("%Y-%m-%d %H:%M") + "Z"


# =========================================================================== SVG charts
# Hand-written SVG: no plotting library in the driver, nothing for the browser to fetch.

PALETTE = ("#3b6ea8", "#e08a2c", "#5a9e5a", "#b04a4a", "#7b62a8", "#8c7054", "#c45ea3")
_FONT = 'font-family="system-ui, sans-serif" font-size="12"'
_CHAR_PX = 6.6  # mean glyph width at 12 px, to size label margins


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k steps) from ≤ lo to ≥ hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= step * m:
            step *= m
            break
    start = math.floor(lo / step + 1e-9) * step
    ticks = [start]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(ticks[-1] + step)
    return [round(t, 12) for t in ticks]


def _svg_open(width: float, height: float, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(title)}" {_FONT}>'
            f"<title>{esc(title)}</title>")


def _text(x: float, y: float, s: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{esc(s)}</text>'


def _clip_label(label: str, max_chars: int) -> str:
    return label if len(label) <= max_chars else label[: max_chars - 1] + "…"


def _legend(names: Sequence[str], x: float, y: float) -> str:
    parts, cx = [], x
    for i, name in enumerate(names):
        colour = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{cx:.1f}" y="{y - 9:.1f}" width="10" height="10" '
                     f'fill="{colour}"/>')
        parts.append(_text(cx + 14, y, name))
        cx += 24 + _CHAR_PX * len(name)
    return "".join(parts)


def bar_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    x_label: str,
    fmt: Callable[[float | None], str] = fmt_compact,
    notes: Sequence[str] | None = None,
    width: int = 760,
) -> str:
    """Horizontal bars, one group per label and one bar per series (a legend when there are
    several), with the value (and an optional note such as a share) at each bar's end."""
    names = list(series)
    values = [v for vs in series.values() for v in vs if v is not None]
    vmax = max([0.0, *values])
    ticks = nice_ticks(0.0, vmax or 1.0)
    top = ticks[-1] or 1.0
    label_w = min(260.0, 12 + _CHAR_PX * max([4, *(len(s) for s in labels)]))
    max_chars = int((label_w - 12) / _CHAR_PX)
    value_w = 12 + _CHAR_PX * max([6, *(len(fmt(v)) + 2 + (len(notes[i]) if notes else 0)
                                        for vs in series.values()
                                        for i, v in enumerate(vs))])
    plot_w = max(120.0, width - label_w - value_w - 10)
    bar_h, gap = 16.0, 8.0
    group_h = bar_h * len(names) + gap
    head = 26.0 + (18.0 if len(names) > 1 else 0.0)
    height = head + group_h * len(labels) + 44
    x0 = label_w

    def sx(v: float) -> float:
        return x0 + plot_w * v / top

    out = [_svg_open(width, height, title), _text(0, 16, title, extra=' font-weight="600"')]
    if len(names) > 1:
        out.append(_legend(names, x0, 38))
    axis_y = head + group_h * len(labels)
    for t in ticks:
        out.append(f'<line x1="{sx(t):.1f}" y1="{head - 4:.1f}" x2="{sx(t):.1f}" '
                   f'y2="{axis_y:.1f}" stroke="#e3e3e3"/>')
        out.append(_text(sx(t), axis_y + 15, fmt(t), "middle", ' fill="#555"'))
    out.append(f'<line x1="{x0:.1f}" y1="{axis_y:.1f}" x2="{x0 + plot_w:.1f}" y2="{axis_y:.1f}" '
               'stroke="#888"/>')
    out.append(_text(x0 + plot_w / 2, axis_y + 34, x_label, "middle", ' fill="#333"'))
    for i, label in enumerate(labels):
        gy = head + i * group_h
        out.append(_text(x0 - 8, gy + group_h / 2 + 0.5, _clip_label(label, max_chars), "end",
                         ' dominant-baseline="middle"'))
        for j, name in enumerate(names):
            v = series[name][i]
            y = gy + j * bar_h
            note = f"  {notes[i]}" if notes and notes[i] else ""
            if v is None:
                out.append(_text(x0 + 4, y + bar_h - 4, "n/a", extra=' fill="#888"'))
                continue
            w = max(0.0, sx(v) - x0)
            out.append(f'<rect x="{x0:.1f}" y="{y + 1:.1f}" width="{w:.1f}" '
                       f'height="{bar_h - 2:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                       f"<title>{esc(label)} · {esc(name)}: {esc(fmt(v))}</title></rect>")
            out.append(_text(x0 + w + 4, y + bar_h - 4, fmt(v) + note, extra=' fill="#222"'))
    out.append("</svg>")
    return "".join(out)


def histogram(
    bins: Sequence[tuple[float, float, int]],
    *,
    title: str,
    x_label: str,
    y_label: str = "documents",
    log_x: bool = False,
    width: int = 520,
    height: int = 260,
) -> str:
    """Vertical bars over contiguous (low, high, count) bins; with log_x the bins are equal
    in log scale and the axis is labelled at powers of ten."""
    left, right, top_m, bottom = 56.0, 14.0, 28.0, 48.0
    plot_w, plot_h = width - left - right, height - top_m - bottom
    out = [_svg_open(width, height, title), _text(0, 16, title, extra=' font-weight="600"')]
    if not bins:
        out.append(_text(width / 2, height / 2, "no values", "middle", ' fill="#888"'))
        return "".join(out) + "</svg>"
    ticks = nice_ticks(0.0, max(c for _, _, c in bins) or 1.0, 4)
    ymax = ticks[-1] or 1.0
    n = len(bins)
    bw = plot_w / n
    base = top_m + plot_h

    def sy(v: float) -> float:
        return base - plot_h * v / ymax

    for t in ticks:
        out.append(f'<line x1="{left:.1f}" y1="{sy(t):.1f}" x2="{left + plot_w:.1f}" '
                   f'y2="{sy(t):.1f}" stroke="#e3e3e3"/>')
        out.append(_text(left - 6, sy(t) + 4, fmt_compact(t), "end", ' fill="#555"'))
    for i, (lo, hi, count) in enumerate(bins):
        x = left + i * bw
        out.append(f'<rect x="{x + 0.5:.1f}" y="{sy(count):.1f}" width="{max(0.5, bw - 1):.1f}" '
                   f'height="{base - sy(count):.1f}" fill="{PALETTE[0]}"><title>'
                   f"{esc(fmt_compact(lo))} – {esc(fmt_compact(hi))}: {count:,}</title></rect>")
    # Edge labels: powers of ten on a log axis, else about six evenly spaced edges.
    edges = [b[0] for b in bins] + [bins[-1][1]]
    if log_x:
        marks = [i for i, e in enumerate(edges) if e > 0 and abs(math.log10(e) - round(
            math.log10(e))) < 1e-6]
    else:
        every = max(1, math.ceil(n / 6))
        marks = list(range(0, n + 1, every))
    for i in marks:
        x = left + i * bw
        out.append(f'<line x1="{x:.1f}" y1="{base:.1f}" x2="{x:.1f}" y2="{base + 4:.1f}" '
                   'stroke="#888"/>')
        out.append(_text(x, base + 16, fmt_compact(edges[i]), "middle", ' fill="#555"'))
    out.append(f'<line x1="{left:.1f}" y1="{base:.1f}" x2="{left + plot_w:.1f}" y2="{base:.1f}" '
               'stroke="#888"/>')
    out.append(_text(left + plot_w / 2, height - 8, x_label + (" (log scale)" if log_x else ""),
                     "middle", ' fill="#333"'))
    out.append(_text(14, top_m + plot_h / 2, y_label, "middle",
                     f' fill="#333" transform="rotate(-90 14 {top_m + plot_h / 2:.1f})"'))
    return "".join(out) + "</svg>"


def line_chart(
    x_labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    fmt: Callable[[float | None], str] = fmt_compact,
    width: int = 360,
    height: int = 200,
) -> str:
    """Lines over equally spaced points (runs in order); a None value leaves a gap."""
    left, right, top_m, bottom = 56.0, 12.0, 28.0 + (16.0 if len(series) > 1 else 0.0), 44.0
    plot_w, plot_h = width - left - right, height - top_m - bottom
    out = [_svg_open(width, height, title), _text(0, 16, title, extra=' font-weight="600"')]
    if len(series) > 1:
        out.append(_legend(list(series), left, 36))
    values = [v for vs in series.values() for v in vs if v is not None]
    if not values:
        out.append(_text(width / 2, height / 2, "no values", "middle", ' fill="#888"'))
        return "".join(out) + "</svg>"
    lo = min(0.0, min(values))
    ticks = nice_ticks(lo, max(values) if max(values) > lo else lo + 1, 4)
    ymin, ymax = ticks[0], ticks[-1]
    n = len(x_labels)
    base = top_m + plot_h

    def sx(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def sy(v: float) -> float:
        return base - plot_h * (v - ymin) / ((ymax - ymin) or 1.0)

    for t in ticks:
        out.append(f'<line x1="{left:.1f}" y1="{sy(t):.1f}" x2="{left + plot_w:.1f}" '
                   f'y2="{sy(t):.1f}" stroke="#e3e3e3"/>')
        out.append(_text(left - 6, sy(t) + 4, fmt(t), "end", ' fill="#555"'))
    out.append(f'<line x1="{left:.1f}" y1="{base:.1f}" x2="{left + plot_w:.1f}" y2="{base:.1f}" '
               'stroke="#888"/>')
    every = max(1, math.ceil(n / 4))
    shown = sorted(set(range(0, n, every)) | {n - 1})
    for i in shown:
        if 0 < n - 1 - i < every / 2 and i != n - 1:
            continue  # too close to the last label
        # The end labels align inwards so that they stay inside the chart.
        anchor = "middle" if n == 1 else "start" if i == 0 else "end" if i == n - 1 else "middle"
        out.append(_text(sx(i), base + 15, x_labels[i], anchor, ' fill="#555"'))
    for j, (name, vs) in enumerate(series.items()):
        colour = PALETTE[j % len(PALETTE)]
        segment: list[str] = []
        segments = [segment]
        for i, v in enumerate(vs):
            if v is None:
                segment = []
                segments.append(segment)
                continue
            segment.append(f"{sx(i):.1f},{sy(v):.1f}")
            out.append(f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="3" fill="{colour}">'
                       f"<title>{esc(name)} · {esc(x_labels[i])}: {esc(fmt(v))}</title></circle>")
        for seg in segments:
            if len(seg) > 1:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{colour}" '
                           'stroke-width="2"/>')
    out.append(_text(left + plot_w / 2, height - 6, x_label, "middle", ' fill="#333"'))
    out.append(_text(12, top_m + plot_h / 2, y_label, "middle",
                     f' fill="#333" transform="rotate(-90 12 {top_m + plot_h / 2:.1f})"'))
    return "".join(out) + "</svg>"


# =========================================================================== what the lake says


@dataclass
class RunInfo:
    job: str
    run_id: str
    status: str
    rows_in: int | None
    rows_out: int | None
    counts: dict[str, int]
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    cpu_seconds: float | None = None
    task_seconds: float | None = None
    gate_status: str | None = None
    gate_summary: str | None = None

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


@dataclass
class FunnelRow:
    table: str
    job: str
    version: int | None = None  # None: the table does not exist
    documents: int | None = None
    text_bytes: int | None = None
    tokens: int | None = None  # the shards row only
    run: RunInfo | None = None  # the job's last succeeded run (the one that wrote the table)
    latest: RunInfo | None = None  # the job's latest run, whatever its status

    @property
    def present(self) -> bool:
        return self.documents is not None


@dataclass
class Histogram:
    bins: list[tuple[float, float, int]]
    source: str  # "table.column@vN"
    missing: int = 0  # null values (e.g. perplexity of a language without a model)
    nonpositive: int = 0  # zero or below, outside a log axis


@dataclass
class CostLine:
    job: str
    run_id: str
    cpu_seconds: float | None
    wall_seconds: float | None
    task_seconds: float | None = None

    def usd(self, price: float) -> float | None:
        return None if self.cpu_seconds is None else self.cpu_seconds / 3600 * price


@dataclass
class Cost:
    lines: list[CostLine]
    price: float
    measured: bool  # runs has a cpu_seconds column
    total_tokens: int | None
    task_measured: bool = False  # runs has a task_seconds column

    @property
    def task_usd_per_million_tokens(self) -> float | None:
        known = [c.task_seconds for c in self.lines if c.task_seconds is not None]
        if not known or not self.total_tokens:
            return None
        return sum(known) / 3600 * self.price / (self.total_tokens / 1e6)

    @property
    def cpu_seconds(self) -> float | None:
        known = [c.cpu_seconds for c in self.lines if c.cpu_seconds is not None]
        return sum(known) if known else None

    @property
    def usd(self) -> float | None:
        s = self.cpu_seconds
        return None if s is None else s / 3600 * self.price

    @property
    def unmeasured(self) -> list[str]:
        return [c.job for c in self.lines if c.cpu_seconds is None]

    @property
    def usd_per_million_tokens(self) -> float | None:
        if self.usd is None or not self.total_tokens:
            return None
        return self.usd / (self.total_tokens / 1e6)


@dataclass
class ReportData:
    root: str
    run_id: str
    generated_at: datetime
    core_hour_usd: float
    funnel: list[FunnelRow] = field(default_factory=list)
    drops: list[tuple[str, str, int]] | None = None  # (stage, reason, documents)
    samples: list[dict[str, Any]] | None = None
    histograms: dict[str, Histogram | None] = field(default_factory=dict)
    cluster_sizes: list[tuple[str, int, int]] | None = None  # (size label, clusters, docs)
    cluster_kinds: dict[str, int] | None = None
    pii: tuple[str, dict[str, int]] | None = None  # (run_id, counts)
    manifest: dict[str, Any] | None = None
    manifest_error: str | None = None
    runs: list[RunInfo] | None = None  # oldest first
    runs_columns: frozenset[str] = frozenset()
    versions: dict[str, int] = field(default_factory=dict)  # tables read → version

    @property
    def total_tokens(self) -> int | None:
        if not self.manifest:
            return None
        return sum(int(s.get("tokens", 0)) for s in self.manifest.get("sources", {}).values())

    def latest_runs(self, done_only: bool = False) -> dict[str, RunInfo]:
        return {r.job: r for r in self.runs or []
                if not done_only or r.status in ("succeeded", "partial")}

    def cost(self) -> Cost:
        """The last succeeded (or partial) run of every job but this one: the CPU that one
        pass of the pipeline which made the current shards took."""
        done = self.latest_runs(done_only=True)
        done.pop(JOB, None)
        order = {job: i for i, job in enumerate(STAGE_ORDER)}
        lines = [CostLine(r.job, r.run_id, r.cpu_seconds, r.seconds, r.task_seconds)
                 for r in sorted(done.values(), key=lambda r: (order.get(r.job, 99), r.job))]
        return Cost(lines, self.core_hour_usd, CPU_SECONDS in self.runs_columns,
                    self.total_tokens, TASK_SECONDS in self.runs_columns)


class Lake:
    """Reads the lake for the report: every table at its current version, or None where it
    does not exist yet."""

    def __init__(self, spark: Any, root: str) -> None:
        self.spark, self.root = spark, root
        self.versions: dict[str, int] = {}

    def table(self, name: str) -> Any | None:
        path = table_path(self.root, name)
        version = delta_version(self.spark, path)
        if version is None:
            return None
        self.versions[name] = version
        return self.spark.read.format("delta").option("versionAsOf", version).load(path)


def length_profiles(lake: Lake) -> dict[str, tuple[int, int | None, list[tuple[int, int]]]]:
    """For every stage table that exists: documents, UTF-8 text bytes, and documents per log
    bucket of text length in characters (floor(4·log10 chars); -1 for an empty text). One
    Spark job over the union of the tables, so the funnel and the length histograms cost one
    scan of each table's text column."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames: list[Any] = []
    out: dict[str, tuple[int, int | None, list[tuple[int, int]]]] = {}
    for name, _ in FUNNEL:
        df = None if name == SHARDS_DIR else lake.table(name)
        if df is None:
            continue
        if "text" not in df.columns:  # counted, but it has no text to measure
            out[name] = (df.count(), None, [])
            continue
        out[name] = (0, 0, [])  # an empty table has no row in the aggregate below
        frames.append(df.select(F.lit(name).alias("table"), "text"))
    if not frames:
        return out
    chars = F.length("text")
    bucket = F.when(chars > 0, F.floor(F.log10(chars) * LENGTH_BINS_PER_DECADE)).otherwise(-1)
    rows = (
        reduce(lambda a, b: a.unionByName(b), frames)
        .select("table", bucket.cast("long").alias("b"), F.octet_length("text").alias("bytes"))
        .groupBy("table", "b").agg(F.count(F.lit(1)).alias("n"), F.sum("bytes").alias("bytes"))
        .collect()
    )
    for name in {r["table"] for r in rows}:
        mine = [r for r in rows if r["table"] == name]
        out[name] = (sum(int(r["n"]) for r in mine), sum(int(r["bytes"] or 0) for r in mine),
                     sorted((int(r["b"]), int(r["n"])) for r in mine))
    return out


def log_bins(buckets: Sequence[tuple[int, int]], per_decade: int) -> list[tuple[float, float, int]]:
    """Sparse log buckets (floor(per_decade·log10 x), count) as contiguous bins, gaps filled
    with zeros; more than 48 bins are merged into whole decades."""
    buckets = [(b, n) for b, n in buckets if n]
    if not buckets:
        return []
    lo, hi = min(b for b, _ in buckets), max(b for b, _ in buckets)
    if hi - lo + 1 > 48 and per_decade > 1:
        merged: dict[int, int] = {}
        for b, n in buckets:
            merged[b // per_decade] = merged.get(b // per_decade, 0) + n
        return log_bins(sorted(merged.items()), 1)
    counts = dict(buckets)
    return [(10 ** (b / per_decade), 10 ** ((b + 1) / per_decade), counts.get(b, 0))
            for b in range(lo, hi + 1)]


def length_histogram(profile: list[tuple[int, int]], source: str) -> Histogram:
    empty = sum(n for b, n in profile if b < 0)
    return Histogram(log_bins([(b, n) for b, n in profile if b >= 0], LENGTH_BINS_PER_DECADE),
                     source, nonpositive=empty)


def score_histogram(df: Any, column: str, source: str, bins: int = SCORE_BINS) -> Histogram:
    """A [0, 1] score in equal bins (values outside are clipped to the end bins)."""
    from pyspark.sql import functions as F

    x = F.col(column).cast("double")
    bucket = F.when(x.isNull(), F.lit(-1)).otherwise(
        F.least(F.greatest(F.floor(x * bins), F.lit(0)), F.lit(bins - 1)))
    counts = {int(r["b"]): int(r["count"])
              for r in df.select(bucket.cast("long").alias("b")).groupBy("b").count().collect()}
    return Histogram([(i / bins, (i + 1) / bins, counts.get(i, 0)) for i in range(bins)], source,
                     missing=counts.get(-1, 0))


def log_histogram(df: Any, column: str, source: str) -> Histogram:
    """A positive, heavy-tailed value (perplexity) in log buckets."""
    from pyspark.sql import functions as F

    x = F.col(column).cast("double")
    missing, nonpos = -(1 << 40), -(1 << 40) + 1  # sentinel buckets
    bucket = (F.when(x.isNull() | F.isnan(x), F.lit(missing)).when(x <= 0, F.lit(nonpos))
              .otherwise(F.floor(F.log10(x) * LENGTH_BINS_PER_DECADE)))
    rows = df.select(bucket.cast("long").alias("b")).groupBy("b").count().collect()
    counts = {int(r["b"]): int(r["count"]) for r in rows}
    return Histogram(
        log_bins([(b, n) for b, n in counts.items() if b > nonpos], LENGTH_BINS_PER_DECADE),
        source, missing=counts.get(missing, 0), nonpositive=counts.get(nonpos, 0))


def read_runs(lake: Lake, current_run: str) -> tuple[list[RunInfo] | None, frozenset[str]]:
    """The last RUNS_PER_JOB runs of every job, oldest first, without this report's own."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = lake.table(RUNS.name)
    if df is None:
        return None, frozenset()
    columns = frozenset(df.columns)
    extra = [c for c in (CPU_SECONDS, TASK_SECONDS, GATE_STATUS, GATE_SUMMARY) if c in columns]
    recent = Window.partitionBy("job").orderBy(F.col("started_at").desc(), F.col("run_id").desc())
    rows = (
        df.where(F.col("run_id") != current_run)
        .select("job", "run_id", "status", "rows_in", "rows_out", "counts", "started_at",
                "ended_at", "error", *extra)
        .withColumn("n", F.row_number().over(recent)).where(F.col("n") <= RUNS_PER_JOB)
        .orderBy("started_at", "run_id").collect()
    )
    runs = []
    for r in rows:
        d = r.asDict()
        runs.append(RunInfo(
            job=d["job"], run_id=d["run_id"], status=d["status"], rows_in=d["rows_in"],
            rows_out=d["rows_out"], counts={k: int(v) for k, v in (d["counts"] or {}).items()
                                            if v is not None},
            started_at=d["started_at"], ended_at=d["ended_at"], error=d["error"],
            cpu_seconds=None if d.get(CPU_SECONDS) is None else float(d[CPU_SECONDS]),
            task_seconds=None if d.get(TASK_SECONDS) is None else float(d[TASK_SECONDS]),
            gate_status=d.get(GATE_STATUS), gate_summary=d.get(GATE_SUMMARY),
        ))
    return runs, columns


def read_manifest_json(lake: Lake) -> tuple[dict[str, Any] | None, str | None]:
    """`<root>/shards/manifest.json` as JSON (the shard files themselves are not checked: the
    report describes the manifest, it does not train on it)."""
    path = f"{table_path(lake.root, SHARDS_DIR)}/{MANIFEST}"
    if not path_exists(lake.spark, path):
        return None, None
    try:
        raw = json.loads(read_small_text(lake.spark, path))
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"unreadable manifest {path}: {e}"
    if not isinstance(raw, dict) or not isinstance(raw.get("sources"), dict):
        return None, f"malformed manifest {path}: no sources"
    return raw, None


def read_drops(lake: Lake) -> tuple[list[tuple[str, str, int]] | None, list[dict] | None]:
    """Documents per (stage, reason), and a few dropped documents of every reason with the
    start of their ingested text (documents ingest dropped have none)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rej = lake.table(REJECTIONS.name)
    if rej is None:
        return None, None
    order = {job: i for i, job in enumerate(STAGE_ORDER)}
    drops = sorted(
        ((r["stage"], r["reason"], int(r["count"]))
         for r in rej.groupBy("stage", "reason").count().collect()),
        key=lambda t: (order.get(t[0], 99), t[0], -t[2], t[1]),
    )
    # doc_ids are hashes, so the smallest ones are an arbitrary but repeatable sample.
    per_reason = Window.partitionBy("stage", "reason").orderBy("doc_id")
    picked = (
        rej.withColumn("n", F.row_number().over(per_reason))
        .where(F.col("n") <= SAMPLES_PER_REASON)
        .select("doc_id", "url", "stage", "reason", "signals")
    )
    docs = lake.table(DOCS.name)
    if docs is not None:
        texts = docs.select("doc_id", F.substring("text", 1, SAMPLE_CHARS).alias("text"))
        picked = texts.join(F.broadcast(picked), "doc_id", "right")
    else:
        picked = picked.withColumn("text", F.lit(None).cast("string"))
    rows = picked.orderBy("stage", "reason", "doc_id").limit(MAX_SAMPLES * 2).collect()
    samples = sorted((r.asDict() for r in rows),
                     key=lambda d: (order.get(d["stage"], 99), d["stage"], d["reason"],
                                    d["doc_id"]))[:MAX_SAMPLES]
    return drops, samples


def read_clusters(lake: Lake) -> tuple[list[tuple[str, int, int]] | None, dict[str, int] | None]:
    """Clusters per size (sizes above 10 in power-of-two ranges) and members per kind."""
    from pyspark.sql import functions as F

    dc = lake.table(DUP_CLUSTERS.name)
    if dc is None:
        return None, None
    size = F.col("size")
    low = F.when(size <= 10, size).otherwise(F.pow(F.lit(2), F.floor(F.log2(size))).cast("long"))
    rows = (
        dc.groupBy("cluster_id").agg(F.max("cluster_size").alias("size"))
        .select(low.alias("low"), size)
        .groupBy("low").agg(F.count(F.lit(1)).alias("clusters"), F.sum("size").alias("docs"))
        .orderBy("low").collect()
    )
    sizes = []
    for r in rows:
        lo = int(r["low"])
        label = str(lo) if lo <= 10 else f"{lo}–{2 * lo - 1}"
        sizes.append((label, int(r["clusters"]), int(r["docs"] or 0)))
    kinds = {r["kind"]: int(r["count"]) for r in dc.groupBy("kind").count().collect()}
    return sizes, kinds


def gather(spark: Any, root: str, run_id: str, core_hour_usd: float) -> ReportData:
    """Everything the page shows, as small Python values. The reads are independent, so they
    run as concurrent Spark jobs (on a tiny lake the time is Delta log reads and planning on
    the driver, not tasks); each thread keeps the caller's job group, so the Spark UI and the
    run's resource accounting still see them as this run's."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark import inheritable_thread_target

    lake = Lake(spark, root)
    data = ReportData(root=root, run_id=run_id, generated_at=datetime.now(UTC),
                      core_hour_usd=core_hour_usd)

    def lang_scores() -> Histogram | None:
        df = lake.table(LANGID_SIGNALS_NAME)
        if df is None or LANG_SCORE not in df.columns:
            return None
        return score_histogram(df, LANG_SCORE, f"{LANGID_SIGNALS_NAME}.{LANG_SCORE}"
                                               f"@v{lake.versions[LANGID_SIGNALS_NAME]}")

    def perplexities() -> Histogram | None:
        df = lake.table(QUALITY_SIGNALS_NAME)
        if df is None or PERPLEXITY not in df.columns:
            return None
        return log_histogram(df, PERPLEXITY, f"{QUALITY_SIGNALS_NAME}.{PERPLEXITY}"
                                             f"@v{lake.versions[QUALITY_SIGNALS_NAME]}")

    reads: dict[str, Callable[[], Any]] = {
        "profiles": lambda: length_profiles(lake),
        "runs": lambda: read_runs(lake, run_id),
        "manifest": lambda: read_manifest_json(lake),
        "drops": lambda: read_drops(lake),
        "lang_score": lang_scores,
        "perplexity": perplexities,
        "clusters": lambda: read_clusters(lake),
    }
    keep_group = inheritable_thread_target(spark)
    with ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="report") as pool:
        futures = {k: pool.submit(keep_group(f)) for k, f in reads.items()}
        got = {k: f.result() for k, f in futures.items()}

    data.runs, data.runs_columns = got["runs"]
    data.manifest, data.manifest_error = got["manifest"]
    data.drops, data.samples = got["drops"]
    data.cluster_sizes, data.cluster_kinds = got["clusters"]
    data.histograms["lang_score"] = got["lang_score"]
    data.histograms["perplexity"] = got["perplexity"]
    profiles = got["profiles"]
    latest, done = data.latest_runs(), data.latest_runs(done_only=True)
    for name, job in FUNNEL:
        row = FunnelRow(table=name, job=job, run=done.get(job), latest=latest.get(job))
        if name == SHARDS_DIR and data.manifest is not None:
            row.documents = sum(int(s.get("documents", 0))
                                for s in data.manifest["sources"].values())
            row.tokens = data.total_tokens
        elif name in profiles:
            row.version = lake.versions[name]
            row.documents, row.text_bytes, _ = profiles[name]
        data.funnel.append(row)
    kept = [name for name, _ in FUNNEL if name in profiles and profiles[name][1] is not None]

    def lengths(name: str) -> Histogram:
        return length_histogram(profiles[name][2], f"{name}.text@v{lake.versions[name]}")

    data.histograms["length_docs"] = lengths(DOCS.name) if DOCS.name in kept else None
    data.histograms["length_kept"] = (
        lengths(kept[-1]) if kept and kept[-1] != DOCS.name else None)
    pii_runs = [r for r in data.runs or []
                if r.job == "pii" and r.status in ("succeeded", "partial")]
    if pii_runs:
        data.pii = (pii_runs[-1].run_id, pii_runs[-1].counts)
    data.versions = dict(lake.versions)
    return data


# =========================================================================== HTML

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;
 background:#fafafa}
main{max-width:1120px;margin:0 auto;padding:24px 28px 60px;background:#fff}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 8px;border-bottom:2px solid
 #3b6ea8;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#555;font-size:13px}nav{font-size:13px;margin:10px 0}nav a{margin-right:12px;
 color:#3b6ea8}
table{border-collapse:collapse;font-size:13px;margin:8px 0 14px}th,td{border:1px solid #ddd;
 padding:4px 8px;vertical-align:top;text-align:left}th{background:#f0f3f7}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.missing{color:#888;font-style:italic;padding:10px 14px;background:#f4f4f4;
 border-left:4px solid #ccc}
.note{color:#555;font-size:13px}.grid{display:flex;flex-wrap:wrap;gap:18px}
table.samples{table-layout:fixed;width:100%}table.samples td{overflow-wrap:anywhere;
 font-size:12px}table.samples code{font-size:11px}
.sample{font-family:ui-monospace,monospace;font-size:11.5px;color:#333}.err{color:#a33;white-space:pre-wrap;
 word-break:break-word;max-width:520px}
.status-succeeded,.gate-pass{color:#2d7a2d;font-weight:600}
.status-failed,.gate-fail{color:#b03030;font-weight:600}
.status-running,.status-partial,.gate-warn{color:#b07a10;font-weight:600}
.big{font-size:20px;font-weight:600}
svg{background:#fff;max-width:100%;height:auto}
"""


def _missing(what: str) -> str:
    return f'<p class="missing">{esc(what)}: {NOT_RUN}</p>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int] | None = None,
           row_attrs: Sequence[str] | None = None, cls: str = "",
           widths: Sequence[int] | None = None) -> str:
    """An HTML table; cells are already escaped HTML. `widths`: column widths in percent."""
    numeric = numeric or set()
    cols = ("<colgroup>" + "".join(f'<col style="width:{w}%">' for w in widths) + "</colgroup>"
            if widths else "")
    head = "".join(f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = []
    for k, row in enumerate(rows):
        attrs = f" {row_attrs[k]}" if row_attrs else ""
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                        for i, c in enumerate(row))
        body.append(f"<tr{attrs}>{cells}</tr>")
    klass = f' class="{cls}"' if cls else ""
    return (f"<table{klass}>{cols}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            "</table>")


def _status(status: str | None) -> str:
    s = status or "n/a"
    return f'<span class="status-{esc(s.lower())}">{esc(s)}</span>'


def _run_status(run: RunInfo | None, latest: RunInfo | None) -> str:
    if latest is None:
        return f"<em>{NOT_RUN}</em>"
    if run is None or run is latest:
        return _status(latest.status)
    return f"{_status(run.status)}; last run {_status(latest.status)}"


def section_funnel(data: ReportData) -> str:
    rows = data.funnel
    if not any(r.present for r in rows):
        return _missing("docs, the stage tables and the shard manifest")
    first = next((r for r in rows if r.present), None)
    table_rows, attrs = [], []
    prev: FunnelRow | None = None
    for r in rows:
        name = f"{r.table}/{MANIFEST}" if r.table == SHARDS_DIR else r.table
        where = (f"{esc(name)}@v{r.version}" if r.version is not None
                 else esc(name) if r.present else f"{esc(name)} <em>({NOT_RUN})</em>")
        run = r.run
        table_rows.append([
            where,
            esc(r.job),
            f'<span class="docs">{fmt_int(r.documents)}</span>' if r.present else "—",
            fmt_pct(r.documents, first.documents if first else None) if r.present else "—",
            fmt_pct(r.documents, prev.documents if prev else None) if r.present and prev else "—",
            f'<span class="bytes">{fmt_int(r.text_bytes)}</span> ({fmt_bytes(r.text_bytes)})'
            if r.text_bytes is not None else (f"{fmt_int(r.tokens)} tokens" if r.tokens else "—"),
            fmt_int(run.rows_in) if run else "—",
            fmt_int(run.rows_out) if run else "—",
            _run_status(run, r.latest),
        ])
        attrs.append(f'data-stage="{esc(r.table)}"')
        if r.present:
            prev = r
    present = [r for r in rows if r.present]
    doc_chart = bar_chart(
        [r.table for r in present], {"documents": [r.documents for r in present]},
        title="Documents kept per stage", x_label="documents", fmt=fmt_compact,
        notes=[fmt_pct(r.documents, first.documents if first else None) for r in present])
    with_bytes = [r for r in present if r.text_bytes is not None]
    byte_chart = bar_chart(
        [r.table for r in with_bytes], {"text bytes": [r.text_bytes for r in with_bytes]},
        title="Text bytes (UTF-8) kept per stage", x_label="bytes", fmt=fmt_bytes,
        notes=[fmt_pct(r.text_bytes, with_bytes[0].text_bytes) for r in with_bytes],
    ) if with_bytes else ""
    return (
        '<p class="note">Each stage\'s table at its current Delta version, in pipeline order; '
        "the shard row counts the documents in <code>shards/manifest.json</code> (its bytes are "
        "tokens). Rows in / out are what the job's last run recorded in <code>runs</code>.</p>"
        + _table(["table", "job", "documents", "% of ingested", "% of previous",
                  "text bytes", "last run: rows in", "rows out", "status"], table_rows,
                 numeric={2, 3, 4, 5, 6, 7}, row_attrs=attrs, cls="funnel")
        + f'<div class="grid">{doc_chart}{byte_chart}</div>'
    )


def section_drops(data: ReportData) -> str:
    if data.drops is None:
        return _missing("rejections")
    if not data.drops:
        return '<p class="note">No document has been dropped.</p>'
    total = sum(n for _, _, n in data.drops)
    per_stage: dict[str, int] = {}
    for stage, _, n in data.drops:
        per_stage[stage] = per_stage.get(stage, 0) + n
    rows = [[esc(s), esc(reason), fmt_int(n), fmt_pct(n, per_stage[s])]
            for s, reason, n in data.drops]
    chart = bar_chart([f"{s}: {reason}" for s, reason, _ in data.drops],
                      {"documents": [n for _, _, n in data.drops]},
                      title="Dropped documents by stage and reason", x_label="documents",
                      notes=[fmt_pct(n, total) for _, _, n in data.drops])
    out = (f'<p class="note">{fmt_int(total)} documents in <code>rejections</code>'
           f"@v{data.versions.get(REJECTIONS.name)}.</p>"
           + _table(["stage", "reason", "documents", "% of stage's drops"], rows, {2, 3})
           + chart)
    out += "<h3>Sample of dropped documents</h3>"
    if not data.samples:
        return out + '<p class="note">No sample.</p>'
    sample_rows = []
    for d in data.samples:
        signals = d.get("signals") or {}
        # The deciding value first: a quality reason names its signal (gopher_dup_line_fraction).
        ordered = sorted(signals.items(), key=lambda kv: (kv[0] not in d["reason"], kv[0]))
        shown = ", ".join(f"{k}={v}" for k, v in ordered)
        if len(shown) > 200:
            shown = shown[:199] + "…"
        text = d.get("text")
        if text is not None:  # one line per sample: line breaks shown as ⏎
            text = _WHITESPACE.sub(" ", text.replace("\r\n", "\n").replace("\n", " ⏎ ")).strip()
        sample_rows.append([
            esc(d["stage"]), esc(d["reason"]), esc(d.get("url")),
            f"<code>{esc(d['doc_id'])}</code>", esc(shown),
            f'<span class="sample">{esc(text)}</span>' if text is not None
            else '<span class="note">(none: dropped before docs)</span>',
        ])
    return out + (f'<p class="note">Up to {SAMPLES_PER_REASON} documents per reason; text is '
                  f"the first {SAMPLE_CHARS} characters of the ingested text.</p>"
                  + _table(["stage", "reason", "url", "doc_id", "signals",
                            f"text (first {SAMPLE_CHARS} chars)"], sample_rows, cls="samples",
                           widths=(7, 12, 19, 12, 18, 32)))


def _hist_block(h: Histogram | None, missing: str, **chart: Any) -> str:
    if h is None:
        return f"<div>{_missing(missing)}</div>"
    notes = [f"from <code>{esc(h.source)}</code>", f"{fmt_int(sum(c for _, _, c in h.bins))} "
             "values"]
    if h.missing:
        notes.append(f"{fmt_int(h.missing)} without a value")
    if h.nonpositive:
        notes.append(f"{fmt_int(h.nonpositive)} at 0 (not on the log axis)")
    return f'<div>{histogram(h.bins, **chart)}<p class="note">{"; ".join(notes)}</p></div>'


def section_histograms(data: ReportData) -> str:
    h = data.histograms
    return '<div class="grid">' + "".join([
        _hist_block(h.get("lang_score"), LANGID_SIGNALS_NAME, title="Language-ID score",
                    x_label="fastText top-label probability"),
        _hist_block(h.get("perplexity"), QUALITY_SIGNALS_NAME,
                    title="Perplexity (KenLM, per language model)", x_label="perplexity",
                    log_x=True),
        _hist_block(h.get("length_docs"), DOCS.name, title="Document length: ingested",
                    x_label="characters", log_x=True),
        _hist_block(h.get("length_kept"), "a stage after docs",
                    title="Document length: kept (last stage)", x_label="characters",
                    log_x=True),
    ]) + "</div>"


def section_clusters(data: ReportData) -> str:
    if data.cluster_sizes is None:
        return _missing(DUP_CLUSTERS.name)
    if not data.cluster_sizes:
        return '<p class="note">No duplicate cluster.</p>'
    clusters = sum(c for _, c, _ in data.cluster_sizes)
    members = sum(d for _, _, d in data.cluster_sizes)
    kinds = ", ".join(f"{esc(k)}: {fmt_int(v)}" for k, v in sorted((data.cluster_kinds or {})
                                                                   .items()))
    rows = [[esc(label), fmt_int(c), fmt_int(d)] for label, c, d in data.cluster_sizes]
    chart = bar_chart([label for label, _, _ in data.cluster_sizes],
                      {"clusters": [c for _, c, _ in data.cluster_sizes]},
                      title="Duplicate clusters by size", x_label="clusters", width=560)
    return (f'<p class="note">{fmt_int(clusters)} cluster(s) with {fmt_int(members)} documents; '
            f"{fmt_int(members - clusters)} removed as duplicates (one representative kept per "
            f"cluster). Members by kind: {kinds}.</p>"
            + f'<div class="grid">{_table(["cluster size", "clusters", "documents"], rows, {1, 2})}'
            + f"{chart}</div>")


def section_pii(data: ReportData) -> str:
    if data.pii is None:
        return _missing("the pii job")
    run_id, counts = data.pii
    types = list(PII_TYPES) + sorted(
        k for k in counts if k.islower() and k not in PII_TYPES and k not in
        ("masked", "docs_masked", "signals_reused", "signals_computed"))
    types = [t for t in types if t in counts or t in PII_TYPES]
    values = [counts.get(t, 0) for t in types]
    rows = [[esc(t), fmt_int(v)] for t, v in zip(types, values, strict=True)]
    chart = bar_chart(types, {"masked values": values}, title="PII masked per type",
                      x_label="values masked", width=560)
    return (f'<p class="note">From run <code>{esc(run_id)}</code>: '
            f"{fmt_int(counts.get('masked'))} values masked in "
            f"{fmt_int(counts.get('docs_masked'))} documents.</p>"
            + f'<div class="grid">{_table(["type", "masked"], rows, {1})}{chart}</div>')


def section_mixture(data: ReportData) -> str:
    if data.manifest_error:
        return f'<p class="err">{esc(data.manifest_error)}</p>'
    if data.manifest is None:
        return _missing(f"{SHARDS_DIR}/{MANIFEST}")
    m = data.manifest
    total = data.total_tokens or 0
    weights = {k: float(v) for k, v in (m.get("weights") or {}).items()}
    names = list(m["sources"]) + [k for k in weights if k not in m["sources"]]
    rows, realised, target = [], [], []
    for name in names:
        info = m["sources"].get(name, {})
        tokens = int(info.get("tokens", 0))
        share = tokens / total if total else 0.0
        w = weights.get(name)
        realised.append(share)
        target.append(w)
        rows.append([esc(name), fmt_int(info.get("documents")), fmt_int(tokens),
                     f"{100 * share:.2f}%", "n/a" if w is None else f"{100 * w:.2f}%",
                     "n/a" if not (w and share) else f"×{w / share:.2f}"])
    chart = bar_chart(names, {"realised share": realised, "target weight": target},
                      title="Token share per source: realised vs target",
                      x_label="share of tokens", fmt=lambda v: "n/a" if v is None
                      else f"{100 * v:.1f}%", width=620)
    tok = m.get("tokenizer") or {}
    return (f'<p class="note">{fmt_int(total)} tokens in {len(m.get("shards") or [])} shards; '
            f"tokenizer sha256 <code>{esc(str(tok.get('sha256', ''))[:16])}</code>, vocabulary "
            f"{fmt_int(tok.get('vocab_size'))}; made from "
            f"{esc(', '.join(f'{k}@v{v}' for k, v in (m.get('inputs') or {}).items()))} at "
            f"{esc(m.get('created_at'))}. The trainer samples sources by target weight, so "
            "“sampling factor” is how much it up- (&gt; 1) or down-samples a source "
            "relative to its natural share.</p>"
            + _table(["source", "documents", "tokens", "realised share", "target weight",
                      "sampling factor"], rows, {1, 2, 3, 4, 5})
            + chart)


def section_cost(data: ReportData) -> str:
    if not data.runs:
        return _missing(f"{RUNS.name} (no job has run)")
    cost = data.cost()
    if not cost.lines:
        return '<p class="note">No succeeded run to price.</p>'
    price = cost.price

    def secs(v: float | None) -> str:
        return "n/a" if v is None else f"{v:,.1f}"

    def hours(v: float | None) -> str:
        return "n/a" if v is None else f"{v / 3600:.4f}"

    task = cost.task_measured
    headers = ["job", "run", "wall", *(["task seconds"] if task else []), "CPU seconds",
               "CPU-hours", "$"]
    rows = [[esc(c.job), f"<code>{esc(c.run_id)}</code>", fmt_seconds(c.wall_seconds),
             *([secs(c.task_seconds)] if task else []), secs(c.cpu_seconds),
             hours(c.cpu_seconds), fmt_usd(c.usd(price))] for c in cost.lines]
    task_known = [c.task_seconds for c in cost.lines if c.task_seconds is not None]
    task_total = sum(task_known) if task_known else None
    rows.append(["<strong>total</strong>", "", "", *([secs(task_total)] if task else []),
                 secs(cost.cpu_seconds), hours(cost.cpu_seconds),
                 f"<strong>{fmt_usd(cost.usd)}</strong>"])
    per_m = cost.usd_per_million_tokens
    head = (f'<p class="note">Executor CPU seconds of each job\'s last succeeded run '
            f"(<code>runs.{CPU_SECONDS}</code>) at ${price:g} per core-hour "
            "(--core-hour-usd).</p>")
    if not cost.measured:
        head += ('<p class="missing">CPU seconds: n/a — <code>runs</code> has no '
                 f"<code>{CPU_SECONDS}</code> column yet (runs recorded before it).</p>")
    elif cost.cpu_seconds is None:
        head += ('<p class="missing">CPU seconds: n/a — no run has recorded '
                 f"<code>{CPU_SECONDS}</code> yet (these runs are older than the column).</p>")
    elif cost.unmeasured:
        head += (f'<p class="note">No CPU time recorded for: {esc(", ".join(cost.unmeasured))}; '
                 "the totals leave them out (a lower bound).</p>")
    value = "" if per_m is None else f"{per_m:.10g}"
    why = ("" if per_m is not None else " (no CPU seconds recorded)" if cost.usd is None
           else " (no token manifest)")
    line = (f'<p>$ per million output tokens: <span class="big" id="usd-per-mtok" '
            f'data-value="{value}">{fmt_usd(per_m)}</span>{why} — '
            f"{fmt_usd(cost.usd)} for {fmt_int(cost.total_tokens)} tokens.</p>")
    task_per_m = cost.task_usd_per_million_tokens
    if task_per_m is not None:
        # Executor CPU time counts the JVM's threads only; a job whose work is Python UDFs
        # (langid, quality, pii, tokenize) spends most of its CPU in Python workers, which
        # task time (the cores its tasks held) includes: the bill for dedicated cores.
        line += (f'<p class="note">At task time (<code>runs.{TASK_SECONDS}</code>: the cores '
                 "tasks held, Python workers included, which executor CPU time leaves out): "
                 f"{fmt_usd(task_per_m)} per million tokens.</p>")
    chart = ""
    priced = [c for c in cost.lines if c.cpu_seconds is not None]
    if priced:
        chart = bar_chart([c.job for c in priced],
                          {"CPU-hours": [c.cpu_seconds / 3600 for c in priced]},
                          title="CPU-hours per stage (last run)", x_label="CPU-hours",
                          fmt=lambda v: "n/a" if v is None else f"{v:.3g}", width=560)
    numeric = set(range(2, len(headers)))
    return head + _table(headers, rows, numeric) + line + chart


def section_trends(data: ReportData) -> str:
    if not data.runs:
        return _missing(f"{RUNS.name} (no job has run)")
    by_job: dict[str, list[RunInfo]] = {}
    for r in data.runs:
        by_job.setdefault(r.job, []).append(r)
    order = {job: i for i, job in enumerate(STAGE_ORDER)}
    charts, single = [], []
    for job in sorted(by_job, key=lambda j: (order.get(j, 99), j)):
        runs = by_job[job]
        if len(runs) >= 2:
            xs = [r.started_at.strftime("%m-%d %H:%M") if r.started_at else "?" for r in runs]
            rows_out = "" if all(r.rows_out is None for r in runs) else line_chart(
                xs, {"rows out": [r.rows_out for r in runs]}, title=f"{job}: rows out",
                x_label="run start (UTC)", y_label="rows")
            seconds = line_chart(xs, {"seconds": [r.seconds for r in runs]},
                                 title=f"{job}: duration", x_label="run start (UTC)",
                                 y_label="seconds", fmt=fmt_seconds)
            charts.append(f"<div>{rows_out}{seconds}</div>")
        else:
            single.extend(runs)
    out = ""
    if charts:
        out += ('<p class="note">Jobs with two runs or more: rows out and wall time per run '
                f"(the last {RUNS_PER_JOB} runs).</p>" + '<div class="grid">' + "".join(charts)
                + "</div>")
    listed = [r for r in data.runs if r in single or r.error]
    if listed:
        rows = [[esc(r.job), f"<code>{esc(r.run_id)}</code>", _status(r.status),
                 fmt_time(r.started_at), fmt_seconds(r.seconds), fmt_int(r.rows_in),
                 fmt_int(r.rows_out),
                 f'<span class="err">{esc((r.error or "")[:1000])}</span>']
                for r in listed]
        out += ("<h3>Jobs with one run, and failed runs</h3>"
                + _table(["job", "run", "status", "started", "wall", "rows in", "rows out",
                          "error"], rows, {4, 5, 6}))
    return out


def _gate_class(status: str) -> str:
    s = status.lower()
    if s.startswith(("pass", "ok", "succ")):
        return "gate-pass"
    if s.startswith(("fail", "error", "block")):
        return "gate-fail"
    return "gate-warn"


def section_gates(data: ReportData) -> str:
    if not data.runs:
        return _missing(f"{RUNS.name} (no job has run)")
    if GATE_STATUS not in data.runs_columns:
        return _missing(f"gates (runs has no {GATE_STATUS} column)")
    gated = [r for r in reversed(data.runs) if r.gate_status or r.gate_summary]
    if not gated:
        return _missing("gates (no run has recorded one)")
    rows = [[esc(r.job), f"<code>{esc(r.run_id)}</code>", fmt_time(r.started_at),
             f'<span class="{_gate_class(r.gate_status or "")}">{esc(r.gate_status or "n/a")}'
             "</span>", f'<span class="err" style="color:#333">'
             f'{esc((r.gate_summary or "")[:2000])}</span>'] for r in gated]
    return _table(["job", "run", "started", "gate", "summary"], rows)


SECTIONS: tuple[tuple[str, str, Callable[[ReportData], str]], ...] = (
    ("funnel", "Funnel", section_funnel),
    ("drops", "Drop reasons", section_drops),
    ("histograms", "Signal histograms", section_histograms),
    ("clusters", "Duplicate clusters", section_clusters),
    ("pii", "PII", section_pii),
    ("mixture", "Tokens per source vs target mixture", section_mixture),
    ("cost", "Cost", section_cost),
    ("trends", "Trends across runs", section_trends),
    ("gates", "Gates", section_gates),
)


def render_report(data: ReportData) -> str:
    """The whole page: no script, no external resource (the CSP says so to the browser)."""
    body = []
    for anchor, title, render in SECTIONS:
        body.append(f'<section id="{anchor}"><h2>{esc(title)}</h2>{render(data)}</section>')
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t, _ in SECTIONS)
    versions = ", ".join(f"{esc(k)}@v{v}" for k, v in sorted(data.versions.items())) or "none"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tokenmill report {esc(data.run_id)}</title><style>{CSS}</style></head><body>"
        f"<main><h1>tokenmill pipeline report</h1>"
        f'<p class="meta">lake <code>{esc(data.root)}</code> · run <code>{esc(data.run_id)}'
        f"</code> · generated {fmt_time(data.generated_at)} · tables read: {versions}</p>"
        f"<nav>{nav}</nav>{''.join(body)}</main></body></html>\n"
    )


# =========================================================================== the job


def write_text_atomic(path: Path, text: str) -> None:
    """A reader (or a browser refreshing latest.html) sees the old page or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def report_targets(ctx: JobContext) -> list[str]:
    if ctx.args.out:
        return [ctx.args.out]
    base = ctx.path(REPORTS_DIR)
    return [f"{base}/{ctx.run_id}.html", f"{base}/{LATEST}"]


def publish(ctx: JobContext, page: str) -> list[str]:
    """Local targets are written directly; remote ones (s3a) from a local file through the
    lake's FileSystem."""
    targets = report_targets(ctx)
    with tempfile.TemporaryDirectory(prefix="tokenmill-report-") as tmp:
        local = Path(tmp) / "report.html"
        local.write_text(page, encoding="utf-8")
        for target in targets:
            if "://" in target and not target.startswith("file:"):
                put_file(ctx.spark, local, target)
            else:
                write_text_atomic(Path(target.removeprefix("file:")).expanduser(), page)
    return targets


def report(ctx: JobContext) -> None:
    with ctx.step("read the lake"):
        data = gather(ctx.spark, ctx.root, ctx.run_id, ctx.args.core_hour_usd)
    page = render_report(data)
    with ctx.step("write the report"):
        targets = publish(ctx, page)
    ctx.output_table = targets[0] if ctx.args.out else f"{REPORTS_DIR}/{ctx.run_id}.html"
    ctx.counts["tables_read"] = len(data.versions)
    ctx.counts["sections_not_run"] = page.count(f": {NOT_RUN}</p>")
    ctx.counts["report_bytes"] = len(page.encode("utf-8"))
    ctx.notes.append(f"report={targets[0]}")


def core_hour_price(value: str) -> float:
    try:
        price = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not (math.isfinite(price) and price >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return price


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(JOB, "Write one self-contained HTML report of the lake: funnel, drop "
                             "reasons, signal histograms, duplicates, PII, mixture, cost, trends.")
    parser.add_argument("--out", help=f"write the report here only (default: <root>/"
                                      f"{REPORTS_DIR}/<run_id>.html and {LATEST})")
    parser.add_argument("--core-hour-usd", type=core_hour_price, default=DEFAULT_CORE_HOUR_USD,
                        metavar="USD",
                        help="price of one CPU core-hour, e.g. an on-demand cloud core-hour, "
                             "to turn runs.cpu_seconds into $ (default: %(default)s)")
    return run_job(JOB, parser, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())

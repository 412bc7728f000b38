"""Plotly figures (as plain JSON-ready dicts) and sparklines for the dashboard pages.

Each builder returns a `Chart`: the figure, or the reason there is none, so a page can say
why a chart is empty instead of showing blank axes. Figures are plain dicts rather than
plotly.graph_objects: validating 10k points through graph_objects costs more than the whole
page budget, and the browser's Plotly.js only needs the JSON.

Every string a user supplied (revisions, installed versions, evidence, series labels) goes
through `plotly_text` before it enters a figure: Plotly draws text as its own mini-HTML
(`<a href>`, `<b>`, `<br>`...) in axes, hover labels and annotations, where Jinja's
escaping does not reach.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from app.detection.changepoints import ChangePoint
from app.services.series import Bucket, Point

# Weight representation -> its one colour on every chart, sparkline and label (constant and
# tensor must be told apart at a glance; none of them is a status colour: red is a
# regression, orange acknowledged, green an improvement). dashboard.css repeats them.
WEIGHT_COLOURS = {"constant": "#1f77b4", "tensor": "#8e44ad", "refit": "#17becf"}
FALLBACK_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
REGRESSION_COLOUR = "#c0392b"
HOST_DRIFT_COLOUR = "#7f8c8d"  # grey: the host moved, not the code
IMPROVEMENT_COLOUR = "#27ae60"
NEUTRAL_COLOUR = "#7f8c8d"
# Above this many points a trace is drawn as a line without markers (SVG stays responsive).
MARKER_LIMIT = 400

Figure = dict[str, Any]


@dataclass(frozen=True)
class Chart:
    figure: Figure | None
    empty_reason: str | None = None


@dataclass(frozen=True)
class SeriesTrace:
    """One series' points on the series page (the page's own series or its sibling): the
    newest raw points, and before them the older history summarised in buckets."""

    label: str  # the weight representation: the axis that differs between overlaid series
    points: Sequence[Point]
    older: Sequence[Bucket] = ()

    @cached_property
    def entries(self) -> list[_Entry]:
        return _entries(self)


@dataclass(frozen=True)
class _Entry:
    """A point or a bucket, as the chart draws it."""

    x: str
    created_at: datetime
    speedup: float
    ci_low: float
    ci_high: float
    baseline_ms: float | None
    candidate_ms: float | None
    when: str
    what: str  # versions, or how many results a bucket summarises
    run: str


def _entries(trace: SeriesTrace) -> list[_Entry]:
    """The trace's buckets, then its points (SeriesTrace.entries caches this: the speedup
    and the latency figure draw the same entries)."""
    out = []
    versions: dict[tuple[tuple[str, str], ...], str] = {}
    for b in trace.older:
        x = plotly_text(b.first_revision if b.first_revision == b.last_revision
                        else f"{b.first_revision}…{b.last_revision}")
        out.append(_Entry(
            x, b.first_created_at, b.speedup_mean, b.ci_low_min, b.ci_high_max,
            b.baseline_median_ms_mean, b.candidate_median_ms_mean,
            f"{b.first_created_at:%Y-%m-%d} to {b.last_created_at:%Y-%m-%d}",
            f"mean of {b.count} results (older history, summarised)", "-"))
    for p in trace.points:
        items = tuple(sorted(p.installed_versions.items()))
        text = versions.get(items)
        if text is None:
            text = versions[items] = plotly_text(versions_text(p.installed_versions))
        out.append(_Entry(
            plotly_text(p.revision), p.created_at, p.speedup, p.ci_low, p.ci_high,
            p.baseline_median_ms, p.candidate_median_ms,
            p.created_at.strftime("%Y-%m-%d %H:%M UTC"), text, f"run {p.run_id}"))
    return out


@dataclass(frozen=True)
class Marker:
    """A regression opened by one result: drawn on that point."""

    result_id: int
    status: str
    text: str


def plotly_text(value: str) -> str:
    """The value as Plotly shows it literally: its tags become entities, which Plotly
    decodes for display, so a label can neither link out nor restyle the chart."""
    return html.escape(value, quote=False)


def weight_colour(weights: str) -> str:
    """The one colour of a weight representation on every chart and sparkline."""
    return WEIGHT_COLOURS.get(
        weights, FALLBACK_COLOURS[sum(map(ord, weights)) % len(FALLBACK_COLOURS)])


# How a dot's status shows now that its colour is its weight representation's.
STATUS_SYMBOLS = {"regression": "x", "open": "x", "acknowledged": "diamond",
                  "inconclusive": "diamond"}


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _layout(**extra: Any) -> Figure:
    layout: Figure = {
        "margin": {"l": 60, "r": 20, "t": 30, "b": 60},
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "legend": {"orientation": "h", "y": 1.08, "x": 0},
    }
    layout.update(extra)
    return layout


def versions_text(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted(versions.items())) or "n/a"


def _revision_order(entries: Sequence[Sequence[_Entry]]) -> list[str]:
    """x labels ordered by when they were first measured, across every trace, so overlaid
    series share one x axis even when one of them skipped a revision."""
    first_seen: dict[str, datetime] = {}
    for trace in entries:
        for e in trace:
            if e.x not in first_seen or e.created_at < first_seen[e.x]:
                first_seen[e.x] = e.created_at
    return sorted(first_seen, key=lambda x: first_seen[x])


def speedup_figure(
    traces: Sequence[SeriesTrace],
    *,
    change_points: Sequence[tuple[str, ChangePoint]] = (),
    markers: Sequence[Marker] = (),
    drift: Sequence[Marker] = (),
) -> Chart:
    """Speedup per revision with its CI band; one line per weight representation; change
    points as dashed lines; regressions as marked points (hover: revision, versions, date);
    host drift (the same software as its baseline, moved beyond the threshold: the host's
    doing) as grey rings, apart from regressions."""
    if not any(t.points for t in traces):
        return Chart(None, "no measured points yet: this series has no result with status ok")
    data: list[Figure] = []
    by_result: dict[int, tuple[str, Point]] = {}
    all_entries = [t.entries for t in traces]
    for trace, entries in zip(traces, all_entries, strict=True):
        if not entries:
            continue
        colour = weight_colour(trace.label)
        x = [e.x for e in entries]
        data.append({"type": "scatter", "x": x, "y": [e.ci_high for e in entries],
                     "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip",
                     "showlegend": False, "legendgroup": trace.label})
        data.append({"type": "scatter", "x": x, "y": [e.ci_low for e in entries],
                     "mode": "lines", "line": {"width": 0}, "fill": "tonexty",
                     "fillcolor": _rgba(colour, 0.18), "hoverinfo": "skip",
                     "name": f"{trace.label}: 95% CI", "legendgroup": trace.label})
        data.append({
            "type": "scatter", "x": x, "y": [e.speedup for e in entries],
            "mode": "lines+markers" if len(entries) <= MARKER_LIMIT else "lines",
            "name": f"weights {trace.label}", "legendgroup": trace.label,
            "line": {"color": colour, "width": 2}, "marker": {"size": 6, "color": colour},
            "customdata": [[e.when, e.what, e.ci_low, e.ci_high, e.run] for e in entries],
            "hovertemplate": (
                f"<b>weights {trace.label}</b><br>revision %{{x}}<br>speedup %{{y:.3f}}x "
                "(CI %{customdata[2]:.3f}-%{customdata[3]:.3f})<br>%{customdata[1]}<br>"
                "%{customdata[0]}, %{customdata[4]}<extra></extra>"
            ),
        })
        for p in trace.points:
            by_result[p.result_id] = (trace.label, p)
    for name, group, symbol, size, width, colour in (
            ("regression", markers, "x-thin-open", 18, 3, REGRESSION_COLOUR),
            ("host drift", drift, "circle-open", 16, 2, HOST_DRIFT_COLOUR)):
        marked = [(m, by_result[m.result_id]) for m in group if m.result_id in by_result]
        if not marked:
            continue
        data.append({
            "type": "scatter", "mode": "markers", "name": name,
            "x": [plotly_text(p.revision) for _, (_, p) in marked],
            "y": [p.speedup for _, (_, p) in marked],
            "marker": {"symbol": symbol, "size": size, "color": colour,
                       "line": {"width": width, "color": colour}},
            "text": [plotly_text(f"{name}{f' ({m.status})' if name == 'regression' else ''}, "
                                 f"weights {label}: {m.text}") for m, (label, _) in marked],
            "hovertemplate": "%{text}<extra></extra>",
        })
    shapes: list[Figure] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                             "line": {"color": "#999999", "width": 1, "dash": "dot"}}]
    annotations: list[Figure] = []
    for revision, cp in change_points:
        label = plotly_text(revision)
        colour = REGRESSION_COLOUR if cp.direction == "regression" else IMPROVEMENT_COLOUR
        shapes.append({"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": label,
                       "x1": label, "line": {"color": colour, "width": 1.5, "dash": "dash"}})
        annotations.append({"x": label, "yref": "paper", "y": 1.0, "yanchor": "bottom",
                            "showarrow": False, "font": {"color": colour, "size": 11},
                            "text": f"change {cp.relative_change:+.1%}"})
    layout = _layout(
        xaxis={"title": {"text": "revision"}, "type": "category",
               "categoryorder": "array", "categoryarray": _revision_order(all_entries),
               "gridcolor": "#eeeeee"},
        yaxis={"title": {"text": "speedup over eager (x)"}, "gridcolor": "#eeeeee",
               "rangemode": "tozero"},
        shapes=shapes, annotations=annotations, height=420,
    )
    return Chart({"data": data, "layout": layout})


def latency_figure(traces: Sequence[SeriesTrace]) -> Chart:
    """The two raw latencies (eager and optimized medians) per weight representation."""
    data: list[Figure] = []
    all_entries = [t.entries for t in traces]
    for trace, entries in zip(traces, all_entries, strict=True):
        drawn = [e for e in entries if e.baseline_ms is not None and e.candidate_ms is not None]
        if not drawn:
            continue
        colour = weight_colour(trace.label)
        x = [e.x for e in drawn]
        mode = "lines+markers" if len(drawn) <= MARKER_LIMIT else "lines"
        for side, values, dash in (
            ("eager", [e.baseline_ms for e in drawn], "dot"),
            ("optimized", [e.candidate_ms for e in drawn], "solid"),
        ):
            data.append({
                "type": "scatter", "x": x, "y": values, "mode": mode,
                "name": f"{side} (weights {trace.label})",
                "line": {"color": colour, "dash": dash, "width": 2},
                "marker": {"size": 5, "color": colour},
                "hovertemplate": (f"{side}, weights {trace.label}<br>revision %{{x}}<br>"
                                  "median %{y:.3f} ms<extra></extra>"),
            })
    if not data:
        return Chart(None, "no latencies stored for this series")
    layout = _layout(
        xaxis={"title": {"text": "revision"}, "type": "category", "categoryorder": "array",
               "categoryarray": _revision_order(all_entries), "gridcolor": "#eeeeee"},
        yaxis={"title": {"text": "median latency (ms)"}, "gridcolor": "#eeeeee",
               "rangemode": "tozero"},
        height=420,
    )
    return Chart({"data": data, "layout": layout})


@dataclass(frozen=True)
class Estimate:
    """A labelled speedup with its CI, status and weight representation (overview, run)."""

    label: str
    speedup: float
    ci_low: float
    ci_high: float
    status: str  # "ok" | "regression" | "acknowledged" ...
    weights: str = "constant"


def estimates_figure(estimates: Sequence[Estimate], *, empty_reason: str) -> Chart:
    """Latest speedups as dots with CI whiskers, one row per label; 1x marked. A dot's colour
    is its weight representation's (one legend entry each), its symbol its status."""
    if not estimates:
        return Chart(None, empty_reason)
    data: list[Figure] = []
    for weights in dict.fromkeys(e.weights for e in estimates):
        mine = [e for e in estimates if e.weights == weights]
        colour = weight_colour(weights)
        data.append({
            "type": "scatter", "mode": "markers", "orientation": "h",
            "name": f"weights {plotly_text(weights)}", "legendgroup": weights,
            "y": [plotly_text(e.label) for e in mine], "x": [e.speedup for e in mine],
            "error_x": {"type": "data", "symmetric": False,
                        "array": [e.ci_high - e.speedup for e in mine],
                        "arrayminus": [e.speedup - e.ci_low for e in mine],
                        "color": colour, "thickness": 1.2},
            "marker": {"size": 10, "color": colour,
                       "symbol": [STATUS_SYMBOLS.get(e.status, "circle") for e in mine],
                       "line": {"width": 1.5, "color": colour}},
            "customdata": [[e.ci_low, e.ci_high, e.status] for e in mine],
            "hovertemplate": ("%{y}<br>speedup %{x:.3f}x (CI %{customdata[0]:.3f}-"
                              "%{customdata[1]:.3f})<br>%{customdata[2]}<extra></extra>"),
        })
    layout = _layout(
        xaxis={"title": {"text": "speedup over eager (x), 95% CI"}, "gridcolor": "#eeeeee",
               "rangemode": "tozero"},
        yaxis={"automargin": True, "autorange": "reversed", "type": "category",
               "categoryorder": "array",
               "categoryarray": [plotly_text(e.label) for e in estimates]},
        shapes=[{"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": 1, "x1": 1,
                 "line": {"color": "#999999", "width": 1, "dash": "dot"}}],
        height=max(220, 90 + 26 * len(estimates)),
        margin={"l": 20, "r": 20, "t": 20, "b": 50},
        showlegend=True,
        legend={"orientation": "h", "y": -0.15 if len(estimates) > 4 else -0.35},
    )
    return Chart({"data": data, "layout": layout})


@dataclass(frozen=True)
class Change:
    label: str
    change: float  # head / base - 1
    significant: bool


def changes_figure(changes: Sequence[Change], *, empty_reason: str) -> Chart:
    """Relative speedup change per series; coloured only where the CIs are disjoint."""
    if not changes:
        return Chart(None, empty_reason)
    colours = [
        (IMPROVEMENT_COLOUR if c.change > 0 else REGRESSION_COLOUR) if c.significant
        else NEUTRAL_COLOUR for c in changes
    ]
    data = [{
        "type": "bar", "orientation": "h", "y": [plotly_text(c.label) for c in changes],
        "x": [c.change * 100 for c in changes], "marker": {"color": colours},
        "text": ["significant" if c.significant else "within noise" for c in changes],
        "hovertemplate": "%{y}<br>change %{x:+.1f}%<br>%{text}<extra></extra>",
        "textposition": "none",
    }]
    layout = _layout(
        xaxis={"title": {"text": "speedup change, head vs base (%)"}, "gridcolor": "#eeeeee",
               "zeroline": True, "zerolinecolor": "#999999"},
        yaxis={"automargin": True, "autorange": "reversed", "type": "category"},
        height=max(220, 60 + 26 * len(changes)),
        margin={"l": 20, "r": 20, "t": 20, "b": 50},
    )
    return Chart({"data": data, "layout": layout})


def magnitudes_figure(labels: Sequence[str], magnitudes: Sequence[float],
                      statuses: Sequence[str], *, empty_reason: str) -> Chart:
    """How large each listed regression is (relative speedup drop)."""
    if not labels:
        return Chart(None, empty_reason)
    colours = [REGRESSION_COLOUR if s == "open" else "#e67e22" if s == "acknowledged"
               else NEUTRAL_COLOUR for s in statuses]
    data = [{
        "type": "bar", "orientation": "h", "y": [plotly_text(label) for label in labels],
        "x": [m * 100 for m in magnitudes], "marker": {"color": colours},
        "customdata": list(statuses),
        "hovertemplate": "%{y}<br>%{x:+.1f}% (%{customdata})<extra></extra>",
    }]
    layout = _layout(
        xaxis={"title": {"text": "speedup change when opened (%)"}, "gridcolor": "#eeeeee",
               "zeroline": True, "zerolinecolor": "#999999"},
        yaxis={"automargin": True, "autorange": "reversed", "type": "category"},
        height=max(170, 90 + 30 * len(labels)), bargap=0.45,
        margin={"l": 20, "r": 20, "t": 20, "b": 50},
    )
    return Chart({"data": data, "layout": layout})


def sparkline_svg(values: Sequence[float], *, width: int = 120, height: int = 28,
                  colour: str = "#1f77b4", scale: tuple[float, float] | None = None) -> str:
    """A tiny inline SVG of the newest speedups (numbers only, so the markup is safe);
    the dotted line is 1x when it falls in range. `scale` (low, high) draws every sparkline
    of a page on one scale, so their heights compare; by default each fills its own."""
    if len(values) < 2:
        return ""
    low, high = scale if scale is not None else (min(values), max(values))
    span = (high - low) or max(abs(high) * 0.05, 1e-9)
    pad = 2

    def y(v: float) -> float:
        return pad + (height - 2 * pad) * (1 - (v - low) / span)

    step = (width - 2 * pad) / (len(values) - 1)
    coords = " ".join(f"{pad + i * step:.1f},{y(v):.1f}" for i, v in enumerate(values))
    one = ""
    if low <= 1.0 <= high:
        one = (f'<line x1="0" x2="{width}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" '
               'stroke="#bbbbbb" stroke-dasharray="2,2" stroke-width="1"/>')
    return (f'<svg class="sparkline" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" data-low="{low:.4g}" data-high="{high:.4g}" '
            f'role="img" aria-label="recent speedups">{one}'
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'
            f'<circle cx="{pad + (len(values) - 1) * step:.1f}" cy="{y(values[-1]):.1f}" '
            f'r="2.5" fill="{colour}"/></svg>')


# ---- sweeps and bisects -------------------------------------------------------------------

@dataclass(frozen=True)
class VersionPoint:
    """One release's speedup in a sweep (or a bisect's step)."""

    version: str
    speedup: float
    ci_low: float
    ci_high: float
    note: str = ""  # hover text: run, pins, a step's verdict


def sweep_figure(versions: Sequence[str], traces: Sequence[tuple[str, Sequence[VersionPoint]]],
                 *, package: str, empty_reason: str) -> Chart:
    """Speedup per release, releases on the x axis in release order (every release of the
    sweep, measured or not, so a gap shows), one line per weight representation with its
    95% CI as whiskers and a band."""
    if not any(points for _, points in traces):
        return Chart(None, empty_reason)
    data: list[Figure] = []
    for label, points in traces:
        if not points:
            continue
        colour = weight_colour(label)
        x = [plotly_text(p.version) for p in points]
        data.append({"type": "scatter", "x": x, "y": [p.ci_high for p in points],
                     "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip",
                     "showlegend": False, "legendgroup": label})
        data.append({"type": "scatter", "x": x, "y": [p.ci_low for p in points],
                     "mode": "lines", "line": {"width": 0}, "fill": "tonexty",
                     "fillcolor": _rgba(colour, 0.15), "hoverinfo": "skip",
                     "name": f"{plotly_text(label)}: 95% CI", "legendgroup": label})
        data.append({
            "type": "scatter", "x": x, "y": [p.speedup for p in points],
            "mode": "lines+markers", "name": f"weights {plotly_text(label)}",
            "legendgroup": label, "line": {"color": colour, "width": 2},
            "marker": {"size": 7, "color": colour},
            "error_y": {"type": "data", "symmetric": False,
                        "array": [p.ci_high - p.speedup for p in points],
                        "arrayminus": [p.speedup - p.ci_low for p in points],
                        "color": colour, "thickness": 1.2, "width": 3},
            "customdata": [[p.ci_low, p.ci_high, plotly_text(p.note)] for p in points],
            "hovertemplate": (f"<b>weights {plotly_text(label)}</b><br>"
                              f"{plotly_text(package)} %{{x}}<br>speedup %{{y:.3f}}x "
                              "(CI %{customdata[0]:.3f}-%{customdata[1]:.3f})<br>"
                              "%{customdata[2]}<extra></extra>"),
        })
    layout = _layout(
        xaxis={"title": {"text": f"{plotly_text(package)} release (oldest first)"},
               "type": "category", "categoryorder": "array",
               "categoryarray": [plotly_text(v) for v in versions], "gridcolor": "#eeeeee"},
        yaxis={"title": {"text": "speedup over eager (x), 95% CI"}, "gridcolor": "#eeeeee",
               "rangemode": "tozero"},
        height=440,
    )
    return Chart({"data": data, "layout": layout})


OUTCOME_COLOURS = {"good": "#1f77b4", "bad": REGRESSION_COLOUR, "inconclusive": "#e67e22",
                   "failed": NEUTRAL_COLOUR}


def bisect_figure(order: Sequence[str], steps: Sequence[tuple[VersionPoint, str, int]],
                  *, package: str, empty_reason: str) -> Chart:
    """A bisect's measured steps: speedup per release of the package searched (x in
    release order), coloured by the step's outcome (good, bad, inconclusive), each
    labelled with its step number."""
    if not steps:
        return Chart(None, empty_reason)
    data: list[Figure] = []
    for outcome, colour in OUTCOME_COLOURS.items():
        chosen = [(p, n) for p, o, n in steps if o == outcome]
        if not chosen:
            continue
        data.append({
            "type": "scatter", "mode": "markers+text", "name": outcome,
            "x": [plotly_text(p.version) for p, _ in chosen],
            "y": [p.speedup for p, _ in chosen],
            "text": [f"step {n}" for _, n in chosen], "textposition": "top center",
            "marker": {"size": 11, "color": colour},
            "error_y": {"type": "data", "symmetric": False,
                        "array": [p.ci_high - p.speedup for p, _ in chosen],
                        "arrayminus": [p.speedup - p.ci_low for p, _ in chosen],
                        "color": colour, "thickness": 1.2, "width": 4},
            "customdata": [[p.ci_low, p.ci_high, plotly_text(p.note)] for p, _ in chosen],
            "hovertemplate": (f"{plotly_text(package)} %{{x}} (%{{text}})<br>speedup "
                              "%{y:.3f}x (CI %{customdata[0]:.3f}-%{customdata[1]:.3f})<br>"
                              "%{customdata[2]}<extra></extra>"),
        })
    layout = _layout(
        xaxis={"title": {"text": f"{plotly_text(package)} release"}, "type": "category",
               "categoryorder": "array", "categoryarray": [plotly_text(v) for v in order],
               "gridcolor": "#eeeeee"},
        yaxis={"title": {"text": "speedup over eager (x), 95% CI"}, "gridcolor": "#eeeeee",
               "rangemode": "tozero"},
        height=400, margin={"l": 60, "r": 20, "t": 70, "b": 60},
        legend={"orientation": "h", "y": 1.18, "x": 0},
    )
    return Chart({"data": data, "layout": layout})

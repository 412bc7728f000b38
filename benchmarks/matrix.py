"""Matrices of specs measured here, without the service: built from comma lists, measured
in turns, shown as a table (what `speedwatch bench`, in cli.bench, is made of).

Comma-separated values of model, backend, weights, precision, batch and shape form a cross
product, one validated spec per combination (`build_matrix`; BadInput names the first
problem). `run_matrix` measures each spec in its own child process by default (isolated):
a crash costs one row, and torch.compile variants do not share dynamo's cache within one
process; isolated specs are measured adaptively over processes, so each result's CI
includes the between-process variance (benchmarks.stats.combine_processes).
`render_table` is the summary a person reads; `failed` says which results fail a run.

torch and rich are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from benchmarks.timing_policy import timing_flag, user_timing_fields

if TYPE_CHECKING:
    from benchmarks.result import BenchResult
    from benchmarks.spec import BenchSpec


class BadInput(ValueError):
    """A command line that names no valid matrix; the message is the one line shown."""


# A spec's field as the flag `bench` and `submit` spell it, so an error names what was typed.
FLAG_OF_FIELD = {
    "model": "--model", "backend": "--backend", "weights": "--weights",
    "precision": "--precision", "batch_size": "--batch", "shape_mode": "--shape-mode",
    "opt_level": "--opt-level", "device": "--device", "width": "--width",
    "image_size": "--image-size", "num_classes": "--num-classes", "seed": "--seed",
    "options.sides": "--sides",
    **{f"timing.{name}": timing_flag(name) for name in user_timing_fields()},
}


def flag_message(message: str) -> str:
    """A spec's error ("batch_size: 0 must be ...") with the flag in front ("--batch: ...")."""
    field, sep, rest = message.partition(": ")
    flag = FLAG_OF_FIELD.get(field)
    return f"{flag}: {rest}" if sep and flag else message


def _one_of(value: str, allowed: tuple[str, ...], flag: str) -> None:
    if value not in allowed:
        import difflib

        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise BadInput(f"{flag}: {value!r} is not one of {', '.join(allowed)}{hint}")


def _split(value: str, name: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise BadInput(f"--{name}: needs at least one value")
    return list(dict.fromkeys(items))  # de-duplicate, keep order


def _ints(value: str, name: str) -> list[int]:
    out = []
    for item in _split(value, name):
        try:
            out.append(int(item))
        except ValueError:
            raise BadInput(f"--{name}: {item!r} is not an integer") from None
    return out


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """key=value pairs; values that parse as JSON (numbers, true/false, lists) keep that type."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--option: {pair!r} is not key=value")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key.strip()] = value
    return out


def build_matrix(
    *,
    models: str,
    backends: str,
    weights: str,
    precisions: str,
    batches: str,
    shapes: str,
    base: BenchSpec,
    opt_levels: str = "default",
    builds: str | None = None,
) -> list[BenchSpec]:
    """The cross product of the comma lists, each spec validated (BadInput names the first).

    Optimization levels are each backend's own (benchmarks.spec.OPT_LEVELS): a level that
    some backend of the list has is skipped for the others, one that none has is refused."""
    from benchmarks.spec import BACKENDS, OPT_LEVELS, SpecError

    levels = _split(opt_levels, "opt-level")
    backend_list = _split(backends, "backend")
    for backend in backend_list:  # before the levels: a misspelt backend has none
        _one_of(backend, BACKENDS, "--backend")
    for level in levels:
        if not any(level in OPT_LEVELS.get(b, ()) for b in backend_list):
            raise BadInput(f"--opt-level: {level!r} is a level of none of "
                           f"{', '.join(backend_list)}")
    # build modes side by side (pinned, as-shipped): each a series of its own
    modes = _split(builds, "builds") if builds else [base.timing.builds]
    specs = []
    for model, backend, weight, precision, batch, shape, level, mode in itertools.product(
        _split(models, "model"), backend_list, _split(weights, "weights"),
        _split(precisions, "precision"), _ints(batches, "batch"), _split(shapes, "shape-mode"),
        levels, modes,
    ):
        if level not in OPT_LEVELS.get(backend, ()):
            continue
        spec = replace(base, model=model, backend=backend, weights=weight, precision=precision,
                       batch_size=batch, shape_mode=shape, opt_level=level,
                       timing=replace(base.timing, builds=mode))
        try:
            specs.append(spec.validate())
        except SpecError as exc:
            raise BadInput(flag_message(str(exc))) from None
    return specs


def _fmt_ms(summary: Any) -> str:
    return f"{summary.median_ms:.3f}" if summary is not None else "-"


def _evidence_line(result: BenchResult) -> str:
    ev = result.evidence
    parts = []
    kpi = ev.get("kernels_per_inference")
    if isinstance(kpi, dict):
        parts.append(f"kernels {kpi.get('baseline', 0):.0f}->{kpi.get('candidate', 0):.0f}")
    for key in ("onnx_node_counts", "optimized_node_counts"):
        counts = ev.get(key)
        if isinstance(counts, dict) and counts and all(isinstance(v, int) for v in counts.values()):
            parts.append(f"nodes {sum(counts.values())}")
            break
    if isinstance(ev.get("ort_opt_level"), str):
        parts.append(f"ort {ev['ort_opt_level']}")
    for key, label in (("inductor_kernels", "inductor kernels"),
                       ("trt_engine_layers", "trt engine layers"),
                       ("graph_breaks", "graph breaks")):
        if isinstance(ev.get(key), (int, float)):
            parts.append(f"{label} {ev[key]}")
    if result.compile_seconds is not None:
        parts.append(f"compile {result.compile_seconds:.1f}s")
    return ", ".join(parts)


def model_problem(result: BenchResult) -> str | None:
    """The reason of a cell skipped because its model could not be built (a factory that
    does not import, a misspelt name): the user's own mistake, not a backend this host
    lacks. None for any other result."""
    if result.status != "skipped" or not result.reason:
        return None
    model = str(result.spec.get("model", ""))
    marker = f"model {model}: "
    at = result.reason.find(marker)
    return result.reason[at:] if model and at >= 0 else None


def failed(result: BenchResult) -> bool:
    return result.status == "failed" or (
        result.accuracy is not None and not result.accuracy.passed
    )


def render_table(results: list[BenchResult]) -> Any:
    from rich.table import Table

    table = Table(title="speedwatch bench", show_lines=False)
    for col, justify in (("series", "left"), ("status", "left"), ("baseline ms", "right"),
                         ("candidate ms", "right"), ("speedup [95% CI]", "right"),
                         ("accuracy (rel L2)", "right"), ("evidence / reason", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    styles = {"ok": "green", "skipped": "yellow", "failed": "red"}
    for r in results:
        speed = (f"{r.speedup.value:.3f}x [{r.speedup.ci_low:.3f}, {r.speedup.ci_high:.3f}]"
                 if r.speedup else "-")
        acc = "-"
        if r.accuracy is not None:
            mark = "ok" if r.accuracy.passed else "FAIL"
            acc = f"{r.accuracy.rel_l2:.1e} {mark}"
        detail = r.reason if r.status != "ok" else _evidence_line(r)
        if r.status == "ok" and r.reason:
            detail = f"{r.reason}; {detail}"
        table.add_row(r.series_key, f"[{styles[r.status]}]{r.status}[/]", _fmt_ms(r.baseline),
                      _fmt_ms(r.candidate), speed, acc, detail or "")
    return table


def run_matrix(specs: list[BenchSpec], *, isolate: bool, timeout_s: float,
               threshold: float = 0.03) -> list[BenchResult]:
    """Measure the specs under a progress bar (on stderr, so stdout stays clean).

    Isolated specs are measured adaptively and in turns, one child process of each spec
    per turn (`isolation.run_adaptive_interleaved`), so each spec's processes spread over
    the whole run: its interval then covers the machine's drift over those minutes, which
    back-to-back processes cannot see. With no baseline to compare with here, a spec is
    decided once its CI half-width is at most half of `threshold` (precise enough to judge
    the next run at it), or its process limit or budget is reached. Not isolated: one
    spec after another in this process."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from benchmarks.adaptive import AdaptiveMeasurement
    from benchmarks.isolation import run_adaptive_interleaved
    from benchmarks.runner import run_spec
    from benchmarks.stats import Reference

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task("bench", total=len(specs))
        if not isolate:
            results: list[BenchResult] = []
            for spec in specs:
                progress.update(task, description=spec.series_key(spec.device))
                results.append(run_spec(spec))
                progress.advance(task)
            progress.update(task, description="done")
            return results
        measurements = [AdaptiveMeasurement(spec, reference_for=lambda _f: Reference(threshold),
                                            timeout_s=timeout_s) for spec in specs]
        processes = progress.add_task("processes", total=None)

        def after_each(i: int) -> None:
            progress.update(processes, advance=1, description=(
                f"processes (last: {specs[i].series_key(specs[i].device)}, "
                f"{measurements[i].processes} so far)"))

        results = run_adaptive_interleaved(
            measurements, after_each=after_each,
            on_done=lambda _i, _r: progress.advance(task))
        progress.update(task, description="done")
        return results

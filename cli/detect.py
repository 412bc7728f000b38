"""`speedwatch detect`: change points of series given as JSON (a stable contract).

Input:  {"series": [{"id": str, "values": [float, ...], "higher_is_better": bool,
                     "ci_low": [float | null, ...], "ci_high": [float | null, ...]}]}
Output: {"series": [{"id": str, "change_points": [{"index": int, "direction":
         "regression" | "improvement", "before": float, "after": float,
         "relative_change": float, "p_value": float | null}]}]}

`ci_low`/`ci_high` are optional (both or neither): each point's 95% interval, aligned with
`values`, null for a point without one. Without them the series' own scatter is all the
detector has, as before they existed. `--explain` adds to each change point
`relative_change_ci_low`, `relative_change_ci_high` (the 95% interval of the change) and
`test` (the test that confirmed it); without it the output keys are exactly the above.

`index` is the position of the first value after the change. The same function the service
calls (app.detection.changepoints.detect_change_points) does the work. Bad input exits with
code 2 and one line on stderr that names the problem; never a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from cli.help_format import Command

_SERIES_KEYS = {"id", "values", "higher_is_better"}
_INTERVAL_KEYS = {"ci_low", "ci_high"}


class DetectInputError(ValueError):
    """Input that does not follow the contract; the message names the offending field."""


@dataclass(frozen=True)
class SeriesInput:
    id: str
    values: list[float]
    higher_is_better: bool
    ci_low: list[float | None] | None = None
    ci_high: list[float | None] | None = None


def _numbers(where: str, raw: Any, *, nullable: bool) -> list[float | None]:
    if not isinstance(raw, list):
        raise DetectInputError(f"{where} must be a list of numbers")
    out: list[float | None] = []
    for j, v in enumerate(raw):
        if v is None and nullable:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DetectInputError(f"{where}[{j}] is not a number: {v!r}")
        if not math.isfinite(v):
            raise DetectInputError(f"{where}[{j}] is {v!r}; NaN and infinity are refused")
        out.append(float(v))
    return out


def _intervals(where: str, item: dict[str, Any], values: list[float]
               ) -> tuple[list[float | None] | None, list[float | None] | None]:
    given = _INTERVAL_KEYS & set(item)
    if not given:
        return None, None
    if given != _INTERVAL_KEYS:
        missing = next(iter(_INTERVAL_KEYS - given))
        raise DetectInputError(f"{where} has {next(iter(given))} but not {missing}: "
                               "give both or neither")
    lows = _numbers(f"{where}.ci_low", item["ci_low"], nullable=True)
    highs = _numbers(f"{where}.ci_high", item["ci_high"], nullable=True)
    for name, arr in (("ci_low", lows), ("ci_high", highs)):
        if len(arr) != len(values):
            raise DetectInputError(f"{where}.{name} has {len(arr)} entries, values has "
                                   f"{len(values)}")
    for j, (lo, v, hi) in enumerate(zip(lows, values, highs, strict=True)):
        if (lo is None) != (hi is None):
            raise DetectInputError(f"{where}: point {j} has one interval bound null and "
                                   "the other not")
        if lo is not None and hi is not None and not lo <= v <= hi:
            raise DetectInputError(f"{where}: values[{j}] {v!r} is outside its interval "
                                   f"[{lo!r}, {hi!r}]")
    return lows, highs


def parse_input(text: str) -> list[SeriesInput]:
    """Validate the documented input shape."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DetectInputError(f"input is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or set(data) != {"series"}:
        raise DetectInputError('input must be an object with exactly one key, "series"')
    series = data["series"]
    if not isinstance(series, list):
        raise DetectInputError('"series" must be a list')
    out: list[SeriesInput] = []
    seen: set[str] = set()
    for i, item in enumerate(series):
        where = f"series[{i}]"
        if not isinstance(item, dict):
            raise DetectInputError(f"{where} must be an object")
        missing = _SERIES_KEYS - set(item)
        if missing:
            raise DetectInputError(f"{where} lacks {', '.join(sorted(missing))}")
        unknown = set(item) - _SERIES_KEYS - _INTERVAL_KEYS
        if unknown:
            raise DetectInputError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        sid, values, hib = item["id"], item["values"], item["higher_is_better"]
        if not isinstance(sid, str) or not sid:
            raise DetectInputError(f"{where}.id must be a non-empty string")
        if sid in seen:
            raise DetectInputError(f"{where}.id {sid!r} appears twice")
        seen.add(sid)
        if not isinstance(hib, bool):
            raise DetectInputError(f"{where}.higher_is_better must be true or false")
        numbers = [float(v) for v in _numbers(f"{where}.values", values, nullable=False)
                   if v is not None]
        lows, highs = _intervals(where, item, numbers)
        out.append(SeriesInput(sid, numbers, hib, lows, highs))
    return out


def detect_document(text: str, *, explain: bool = False) -> dict[str, Any]:
    """The whole command as a function: input text in, output document out."""
    from app.detection.changepoints import detect_change_points
    from app.detection.detector_settings import SeriesError

    result = []
    for s in parse_input(text):
        try:
            cps = detect_change_points(s.values, higher_is_better=s.higher_is_better,
                                       ci_low=s.ci_low, ci_high=s.ci_high)
        except SeriesError as exc:
            raise DetectInputError(f"series {s.id!r}: {exc}") from None
        result.append({"id": s.id, "change_points": [c.to_dict(explain=explain)
                                                      for c in cps]})
    return {"series": result}


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DetectInputError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DetectInputError(f"{source}: cannot read ({exc.__class__.__name__})") from None


def register(cli: typer.Typer) -> None:
    @cli.command("detect", cls=Command, rich_help_panel="CI client")
    def detect(
        input: str = typer.Option(..., "--input", "-i",
                                  help="JSON file with the series, or - for stdin"),
        explain: bool = typer.Option(
            False, "--explain",
            help="add each change's 95% interval and the test that confirmed it"),
    ) -> None:
        """Find change points in series of numbers (JSON in, JSON out)."""
        try:
            doc = detect_document(_read(input), explain=explain)
        except DetectInputError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps(doc, allow_nan=False))

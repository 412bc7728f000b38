"""`speedwatch detect`: change points of series given as JSON (a stable contract).

Input:  {"series": [{"id": str, "values": [float, ...], "higher_is_better": bool}]}
Output: {"series": [{"id": str, "change_points": [{"index": int, "direction":
         "regression" | "improvement", "before": float, "after": float,
         "relative_change": float, "p_value": float | null}]}]}

`index` is the position of the first value after the change. The same function the service
calls (app.detection.changepoints.detect_change_points) does the work. Bad input exits with
code 2 and one line on stderr that names the problem; never a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import typer

_SERIES_KEYS = {"id", "values", "higher_is_better"}


class DetectInputError(ValueError):
    """Input that does not follow the contract; the message names the offending field."""


def parse_input(text: str) -> list[tuple[str, list[float], bool]]:
    """Validate the documented input shape; return (id, values, higher_is_better) triples."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DetectInputError(f"input is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or set(data) != {"series"}:
        raise DetectInputError('input must be an object with exactly one key, "series"')
    series = data["series"]
    if not isinstance(series, list):
        raise DetectInputError('"series" must be a list')
    out: list[tuple[str, list[float], bool]] = []
    seen: set[str] = set()
    for i, item in enumerate(series):
        where = f"series[{i}]"
        if not isinstance(item, dict):
            raise DetectInputError(f"{where} must be an object")
        missing = _SERIES_KEYS - set(item)
        if missing:
            raise DetectInputError(f"{where} lacks {', '.join(sorted(missing))}")
        unknown = set(item) - _SERIES_KEYS
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
        if not isinstance(values, list):
            raise DetectInputError(f"{where}.values must be a list of numbers")
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise DetectInputError(f"{where}.values[{j}] is not a number: {v!r}")
            if not math.isfinite(v):
                raise DetectInputError(f"{where}.values[{j}] is {v!r}; NaN and infinity "
                                       "are refused")
        out.append((sid, [float(v) for v in values], hib))
    return out


def detect_document(text: str) -> dict[str, Any]:
    """The whole command as a function: input text in, output document out."""
    from app.detection.changepoints import SeriesError, detect_change_points

    result = []
    for sid, values, hib in parse_input(text):
        try:
            cps = detect_change_points(values, higher_is_better=hib)
        except SeriesError as exc:
            raise DetectInputError(f"series {sid!r}: {exc}") from None
        result.append({"id": sid, "change_points": [c.to_dict() for c in cps]})
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
    @cli.command("detect")
    def detect(
        input: str = typer.Option(..., "--input", "-i",
                                  help="JSON file with the series, or - for stdin"),
    ) -> None:
        """Find change points in series of numbers (JSON in, JSON out)."""
        try:
            doc = detect_document(_read(input))
        except DetectInputError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps(doc, allow_nan=False))

"""The timing flags `bench`, `submit` and `demo` share, made from the timing fields' one
declaration (benchmarks.spec.TimingPolicy): each flag's help is the field's API
description and its check the field's bounds, so the three commands and the API say the
same thing and refuse the same values, the CLI with one line naming the flag."""

from __future__ import annotations

import os
from typing import Any

import typer

from benchmarks.spec import default_timing, timing_knob

# The flags whose name is not their timing field's.
_FLAG_NAMES = {"warmup_iters": "warmup", "budget_seconds": "budget"}


def flag_of(field: str) -> str:
    """The command-line flag of the timing field `field`."""
    return "--" + _FLAG_NAMES.get(field, field).replace("_", "-")


def flag_help(name: str) -> str:
    """The API's description of the timing field `name`, as a flag's help: a sentence."""
    text = timing_knob(name).description or ""
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _defaults(field: str) -> str:
    cpu, gpu = getattr(default_timing("cpu"), field), getattr(default_timing("cuda"), field)
    return f"Default {cpu:g} on the CPU, {gpu:g} on a GPU."


# "Default X on the CPU, Y on a GPU." of the fields whose defaults differ by device and
# whose description does not say them
DEVICE_DEFAULTS = {f: _defaults(f) for f in ("max_processes", "budget_seconds")}


def timing_option(field: str, *, more: str = "", panel: str | None = "Timing") -> Any:
    """The option of a timing field: its flag, no default (the spec's or the server's), its
    help from the declaration plus `more`. Its bounds are checked by `timing_flag_problem`
    (one line naming the flag), not by typer."""
    parts = (flag_help(field), DEVICE_DEFAULTS.get(field, ""), more)
    return typer.Option(None, flag_of(field), help=" ".join(p for p in parts if p),
                        rich_help_panel=panel)


def timing_flag_problem(**values: str | float | None) -> str | None:
    """The first flag (named by its timing field) whose value the field's declaration
    refuses, as the one line to show; None if all can be used."""
    for name, value in values.items():
        if value is None:
            continue
        why = timing_knob(name).refuses(value, stored=False)
        if why is not None:
            return f"{flag_of(name)}: {value!r} {why}"
    return None


def host_load_setting() -> float | None:
    """SPEEDWATCH_MAX_HOST_LOAD, the service's default for the load guard, where `bench`
    (which reads no service settings) finds it set; None: the measurement core's default."""
    raw = os.environ.get("SPEEDWATCH_MAX_HOST_LOAD")
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    if value is None or timing_knob("max_host_load").refuses(value, stored=False):
        return None
    return value

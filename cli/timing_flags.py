"""The timing flags `bench`, `submit` and `demo` share: help and checks made from the timing
fields' one declaration (benchmarks.spec.TimingPolicy), so the three commands and the API say
the same thing and refuse the same values, the CLI with one line naming the flag."""

from __future__ import annotations

import os

from benchmarks.spec import timing_knob


def flag_help(name: str) -> str:
    """The API's description of the timing field `name`, as the flag's help."""
    return timing_knob(name).description or ""


COMPILE_CACHE_HELP = flag_help("compile_cache")
BUILDS_HELP = flag_help("builds")
MAX_HOST_LOAD_HELP = flag_help("max_host_load")


def timing_flag_problem(**values: str | float | None) -> str | None:
    """The first flag (a timing field's name) whose value its declaration refuses, as the one
    line to show; None if all can be used."""
    for name, value in values.items():
        if value is None:
            continue
        why = timing_knob(name).refuses(value, stored=False)
        if why is not None:
            return f"--{name.replace('_', '-')}: {value!r} {why}"
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

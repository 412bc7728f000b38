"""The timing flags of `bench`, `submit` and `demo`, made from the timing fields' one
declaration (benchmarks.timing_policy.TimingPolicy): every field the API describes is a flag of each
command, named by the field (or its `flag`), with the field's API description as its help
and the field's bounds as its check. A command declares none of them: `with_timing_flags`
adds them to its signature and hands the command one `TimingFlags`, so a new timing field
is a flag of all three commands, a key of the project file and a field of the API's request
the moment it is declared."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Optional, TypeVar

import typer

from benchmarks.timing_policy import (
    default_timing,
    timing_fields,
    timing_flag,
    timing_knob,
    user_timing_fields,
)
from cli.flag_groups import flag_group

F = TypeVar("F", bound=Callable[..., Any])


def flag_help(name: str) -> str:
    """The API's description of the timing field `name`, as a flag's help: a sentence."""
    text = timing_knob(name).description or ""
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _defaults(field: str) -> str:
    cpu, gpu = getattr(default_timing("cpu"), field), getattr(default_timing("cuda"), field)
    return f"Default {cpu:g} on the CPU, {gpu:g} on a GPU."


# each timing field's Python type, by name
_KINDS = {name: kind for name, kind, _default, _knob in timing_fields()}

# "Default X on the CPU, Y on a GPU." of the fields whose defaults differ by device and
# whose description does not say them
DEVICE_DEFAULTS = {f: _defaults(f) for f in ("max_processes", "budget_seconds")}


def timing_option(field: str, *, more: str = "", panel: str | None = "Timing") -> Any:
    """The option of a timing field: its flag (`--x/--no-x` for a yes-or-no field), no
    default (the spec's or the server's), its help from the declaration plus `more`. Its
    bounds are checked by `timing_flag_problem` (one line naming the flag), not by typer."""
    parts = (flag_help(field), DEVICE_DEFAULTS.get(field, ""), more)
    flag = timing_flag(field)
    names = f"{flag}/--no-{flag[2:]}" if _KINDS[field] is bool else flag
    return typer.Option(None, names, help=" ".join(p for p in parts if p),
                        rich_help_panel=panel)


class TimingFlags(dict[str, Any]):
    """The timing flags of one command line, by timing field; None: not given."""

    def given(self) -> dict[str, Any]:
        """The fields given a value."""
        return {name: value for name, value in self.items() if value is not None}


def with_timing_flags(*, panel: str | None = "Timing", more: Mapping[str, str] | None = None,
                      leave_out: tuple[str, ...] = ()) -> Callable[[F], F]:
    """A command with one option per user timing field (`user_timing_fields`, less
    `leave_out`), added after its own parameters; the command takes them as one keyword
    argument, `timing` (a TimingFlags). `more`: help added to a field's own."""
    options = {name: (Optional[_KINDS[name]],  # noqa: UP045 (a runtime type, for typer)
                      timing_option(name, more=(more or {}).get(name, ""), panel=panel))
               for name in user_timing_fields() if name not in leave_out}
    return flag_group("timing", options, TimingFlags)


def timing_flag_problem(**values: Any) -> str | None:
    """The first flag (named by its timing field) whose value the field's declaration
    refuses, as the one line to show; None if all can be used."""
    for name, value in values.items():
        if value is None:
            continue
        why = timing_knob(name).refuses(value, stored=False)
        if why is not None:
            return f"{timing_flag(name)}: {value!r} {why}"
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

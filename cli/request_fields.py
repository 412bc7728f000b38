"""What the commands that post to the server (`submit`, `upload`, `sweep`) put in a request
the same way: comma-separated flag values, the environment, and the request fields each
flag sets, so that a 422 from the server names the flag the user typed."""

from __future__ import annotations

from typing import Any

# Request fields -> the flags that set them, shared by every command that names a project,
# a revision and an environment.
WHERE_FLAGS = {
    "project": "--project", "revision": "--revision", "branch": "--branch",
    "environment.pins": "--pin", "environment.interpreter": "--interpreter",
    "environment": "--pin/--interpreter",
}


def split_values(values: list[str] | None) -> list[str]:
    """Accept `--batch 1,8` and `--batch 1 --batch 8` alike."""
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def environment_of(pins: list[str] | None, interpreter: str | None) -> dict[str, Any]:
    """A request's environment: a named interpreter the workers know, or pins."""
    return {"interpreter": interpreter} if interpreter else {"pins": split_values(pins)}

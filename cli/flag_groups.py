"""Flags that several commands share, declared once: `flag_group` adds a group's options to
a command's signature (after the command's own) and hands the command the group's values
as one keyword argument, so a command names the group, not each flag (cli.timing_flags,
cli.matrix_flags)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def flag_group(argument: str, options: Mapping[str, tuple[Any, Any]],
               make: Callable[[dict[str, Any]], Any]) -> Callable[[F], F]:
    """A decorator: `options` (parameter name -> (annotation, typer option)) become keyword
    parameters of the command as typer reads it, and the command receives
    `make({name: value})` as its keyword argument `argument`."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != argument]
        taken = {p.name for p in own} & set(options)
        if taken:
            raise TypeError(f"{command.__name__} declares flags of the group itself: "
                            f"{sorted(taken)}")
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                   annotation=annotation)
                 for name, (annotation, option) in options.items()]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name, None) for name in options}
            return command(*args, **{argument: make(values)}, **kwargs)

        # typer reads the signature (which follows __signature__) and the annotations
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *added])
        run.__annotations__ = {**{k: v for k, v in command.__annotations__.items()
                                  if k != argument},
                               **{p.name: p.annotation for p in added}}
        return run  # type: ignore[return-value]

    return decorate

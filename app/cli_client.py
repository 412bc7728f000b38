"""Placeholder: the owner of this module replaces it with real commands."""

import typer


def register(cli: typer.Typer) -> None:
    return None

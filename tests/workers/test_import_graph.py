"""workers/ imports one way: no module reaches itself through the others' imports, counting
imports inside functions too (a ring of five made any one of them hard to change alone)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

WORKERS = Path(__file__).resolve().parents[2] / "workers"


def imports_of(path: Path) -> set[str]:
    """The workers modules `path` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "workers":
                found |= {f"workers.{a.name}" for a in node.names}
            elif node.module.startswith("workers."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("workers.")}
    return found


def test_the_workers_modules_import_each_other_without_a_cycle() -> None:
    graph = {f"workers.{p.stem}": imports_of(p) - {f"workers.{p.stem}"}
             for p in WORKERS.glob("*.py") if p.stem != "__init__"}
    assert graph["workers.execution"] and graph["workers.tasks"]  # the scan sees imports
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a ring
    assert order.index("workers.execution") < order.index("workers.tasks")
    assert order.index("workers.cell_env") < order.index("workers.confirm")

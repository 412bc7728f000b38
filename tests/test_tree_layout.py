"""What may import what outside the product: scripts, experiments and the shared devkit
never import the tests (a script that needs a helper finds it in devkit), and experiments
do not import scripts; no migration imports product code. Imports inside functions and in
shell heredocs count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHELL_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][\w.]*)", re.MULTILINE)


def top_modules(path: Path) -> set[str]:
    """The first dotted part of every module `path` imports, at any depth of its code."""
    text = path.read_text()
    if path.suffix == ".sh":
        return {m.split(".")[0] for m in SHELL_IMPORT.findall(text)}
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return found


def files(folder: str) -> list[Path]:
    return sorted(p for suffix in ("*.py", "*.sh") for p in (ROOT / folder).rglob(suffix))


@pytest.mark.parametrize("folder", ["scripts", "experiments", "devkit"])
def test_nothing_outside_the_tests_imports_them(folder: str) -> None:
    scanned = files(folder)
    assert scanned, folder
    offenders = [str(p.relative_to(ROOT)) for p in scanned if "tests" in top_modules(p)]
    assert offenders == []


def test_experiments_do_not_import_scripts() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in files("experiments")
                 if "scripts" in top_modules(p)]
    assert offenders == []


def test_the_scan_sees_imports_in_code_and_in_shell() -> None:
    assert "devkit" in top_modules(ROOT / "scripts" / "ci_template_demo.sh")
    assert "devkit" in top_modules(ROOT / "experiments" / "agreement.py")


def test_no_migration_imports_product_code() -> None:
    """An old migration means today what it meant when it ran: it re-states the rules it
    needs instead of importing code that may change after it."""
    product = {"app", "benchmarks", "workers", "cli"}
    scanned = sorted((ROOT / "migrations" / "versions").glob("*.py"))
    assert len(scanned) > 5
    offenders = {str(p.relative_to(ROOT)): sorted(top_modules(p) & product) for p in scanned
                 if top_modules(p) & product}
    assert offenders == {}


def test_the_results_index_lists_every_measurement_folder() -> None:
    """results/README.md is what `scripts/results_index.py` writes from the folders and the
    docs that cite them; a new folder or citation without a rewrite fails here."""
    import subprocess
    import sys

    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "results_index.py"),
                            "--check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr

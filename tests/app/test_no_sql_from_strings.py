"""No SQL is built from strings: every statement the product sends is a SQLAlchemy expression
or a literal (constant) text, so a value from a request can only ever be a bound parameter.

A static check over the source of every package (the dashboard's too, once it is there): a
call that hands SQL to the database must not get an f-string, a `%`/`+` concatenation or a
`.format()` call as its statement.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers", "benchmarks", "migrations")
# Functions and methods that take SQL text as their first argument.
SQL_SINKS = {"text", "execute", "executemany", "exec_driver_sql", "executescript",
             "literal_column", "from_statement"}


def _built_from_strings(node: ast.expr) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("format", "join", "replace"))


def _offences(source: str, filename: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in SQL_SINKS and _built_from_strings(node.args[0]):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def test_no_statement_is_built_from_strings() -> None:
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 20
    offences = [o for p in files for o in _offences(p.read_text(), str(p.relative_to(ROOT)))]
    assert offences == []


def test_the_check_recognises_each_way_of_building_sql() -> None:
    """The control: each pattern is caught, the safe forms are not."""
    unsafe = [
        'session.execute(text(f"SELECT * FROM runs WHERE id = {run_id}"))',
        'connection.exec_driver_sql("DELETE FROM runs WHERE name = \'" + name + "\'")',
        'cursor.execute("SELECT %s" % value)',
        'session.execute(text("SELECT {}".format(value)))',
    ]
    for line in unsafe:
        assert _offences(line, "x.py"), line
    safe = [
        'connection.execute(text("SELECT 1"))',
        "session.execute(select(Run).where(Run.id == run_id))",
        'session.execute(text("SELECT * FROM runs WHERE id = :id"), {"id": run_id})',
    ]
    for line in safe:
        assert not _offences(line, "x.py"), line

"""Write results/README.md: every measurement folder with its date, what ran it and the docs
that cite it, so that a figure in the docs leads to its raw files and a folder to the
command that made it.

    .venv/bin/python scripts/results_index.py          # rewrite the index
    .venv/bin/python scripts/results_index.py --check  # exit 1 when it is out of date

The command is a code block of a citing page that names the folder (else the citing page
gives it in its prose); a folder no page cites is listed as such.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOCS = ROOT / "docs"  # and the READMEs of the repository, the harness and the experiments
DATE = re.compile(r"(20\d\d-\d\d-\d\d)")
HEADER = """# Measurements

Raw results of the measurements the docs report: one folder (or file) per measurement,
named for its device and date. Each row gives the docs that cite it and the command that
made it. This file is written by `scripts/results_index.py`; a test keeps it current.

| folder | date | cited by | command |
|---|---|---|---|
"""


@dataclass
class Entry:
    name: str
    date: str
    pages: list[str]
    command: str


def _blocks(lines: list[str]) -> list[str]:
    """The fenced code blocks of a page, each as one line."""
    out: list[str] = []
    block: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("```"):
            if inside:
                out.append(" ".join(x.strip().rstrip("\\").strip() for x in block if x.strip()))
            inside, block = not inside, []
        elif inside:
            block.append(line)
    return out


def entries() -> list[Entry]:
    sources = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "benchmarks" / "README.md",
               ROOT / "experiments" / "README.md"]
    pages = {p: p.read_text().splitlines() for p in sources if p.exists()}
    found = []
    for item in sorted(RESULTS.iterdir()):
        if item.name == "README.md" or item.name.startswith("."):
            continue
        needle = f"results/{item.name}"
        citing, command = [], ""
        for page, lines in pages.items():
            hits = [i for i, line in enumerate(lines) if needle in line]
            if hits:
                citing.append(str(page.relative_to(ROOT)))
                command = command or next(
                    (b for b in _blocks(lines) if needle in b), "")
        date = DATE.search(item.name)
        found.append(Entry(item.name + ("/" if item.is_dir() else ""),
                           date.group(1) if date else "-", citing, command))
    return found


def render(rows: list[Entry]) -> str:
    out = [HEADER.rstrip("\n")]
    for e in rows:
        cited = ", ".join(f"[{Path(p).name}](../{p})" for p in e.pages) or "not cited"
        command = f"`{e.command}`" if e.command else ("in the citing page" if e.pages else "-")
        out.append(f"| [{e.name}]({e.name}) | {e.date} | {cited} | {command.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render(entries())
    index = RESULTS / "README.md"
    if args.check:
        if not index.exists() or index.read_text() != text:
            print("results/README.md is out of date: run scripts/results_index.py",
                  file=sys.stderr)
            return 1
        return 0
    index.write_text(text)
    print(f"wrote {index.relative_to(ROOT)} ({text.count(chr(10)) - 6} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

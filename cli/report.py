"""What a CI job leaves for people to read: a Markdown summary (GitHub's step summary, a PR
comment), a JUnit XML report (one test case per cell, so CI systems list them), and JSON.

All three are rendered from the run as the API returns it (`GET /api/v1/runs/{id}`), so
`submit --wait` and `speedwatch report` write the same thing. `report --base REV --head REV`
compares any two revisions' latest finished runs through `GET /api/v1/compare`.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer

from cli import project_file
from cli.client import EXIT_ERROR, EXIT_PASS, EXIT_REGRESSION, Api, ClientError
from cli.help_format import Command

VERDICT_WORDS = {"pass": "pass", "regression": "**REGRESSION**", "inconclusive": "inconclusive",
                 "error": "**error**", "improvement": "improvement"}


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def _md(text: str) -> str:
    """A value inside a Markdown table cell: pipes and newlines would break the table, and
    labels are user input, so HTML-ish characters are escaped too."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


def series_url(base: str, key: str, project: str) -> str:
    return f"{base}/series/{quote(key, safe='/')}?project={quote(project, safe='')}"


def _cell_row(cell: dict[str, Any], run: dict[str, Any], base: str) -> list[str]:
    result = cell.get("result") or {}
    judgement = cell.get("judgement") or {}
    comparison = judgement.get("comparison")
    after = "-"
    if result.get("speedup") is not None:
        after = f"{result['speedup']:.2f}x [{result['ci_low']:.2f}, {result['ci_high']:.2f}]"
    before = _x(comparison["baseline_speedup"]) if comparison else "(first)"
    change = "-"
    if comparison:
        change = (f"{_pct(comparison['ratio'])} [{_pct(comparison['ci_low'])}, "
                  f"{_pct(comparison['ci_high'])}]")
    verdict = judgement.get("verdict") or cell["status"]
    notes = [r for r in judgement.get("reasons", []) if r.startswith("what changed")]
    if cell["status"] in ("failed", "skipped") and cell.get("error"):
        notes.append(cell["error"][:200])
    if cell["status"] == "skipped" and result.get("reason"):
        notes.append(str(result["reason"])[:200])
    link = f"[{_md(cell['series_key'])}]({series_url(base, cell['series_key'], run['project'])})"
    return [link, before, after, change, VERDICT_WORDS.get(verdict, verdict),
            _md("; ".join(notes)) or ""]


def markdown(run: dict[str, Any], base: str) -> str:
    """One table of every cell: before (the series' baseline) and after, the change with its
    CI, the verdict and, for a regression, what changed."""
    verdict = run.get("verdict") or run.get("status")
    lines = [
        f"### Speedwatch: {_md(run['project'])} @ {_md(run['revision'])}: "
        f"{VERDICT_WORDS.get(str(verdict), str(verdict))}",
        "",
        f"Run [{run['id']}]({base}/runs/{run['id']}) · speedup over PyTorch eager, 95% CIs.",
        "",
        "| series | before | after [95% CI] | change [95% CI] | verdict | notes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for cell in run.get("cells", []):
        lines.append("| " + " | ".join(_cell_row(cell, run, base)) + " |")
    reasons = [r for r in run.get("reasons", []) if r]
    if reasons:
        lines += ["", "<details><summary>Reasons</summary>", ""]
        lines += [f"- {_md(r)}" for r in reasons[:50]]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def junit(run: dict[str, Any], base: str) -> str:
    """One test case per cell: a regression or an error fails it, an inconclusive or a
    skipped cell is skipped (with the reason), a pass passes."""
    cells = run.get("cells", [])
    suite = ET.Element("testsuite", name=f"speedwatch {run['project']}@{run['revision']}",
                       tests=str(len(cells)))
    failures = errors = skipped = 0
    for cell in cells:
        judgement = cell.get("judgement") or {}
        verdict = judgement.get("verdict")
        result = cell.get("result") or {}
        case = ET.SubElement(suite, "testcase", classname=f"speedwatch.{run['project']}",
                             name=cell["series_key"])
        reasons = "; ".join(judgement.get("reasons") or []) or (cell.get("error") or "")
        if verdict == "regression":
            failures += 1
            ET.SubElement(case, "failure", message=reasons[:500] or "regression",
                          type="regression").text = reasons
        elif verdict == "error" or cell["status"] == "failed":
            errors += 1
            ET.SubElement(case, "error", message=reasons[:500] or "failed",
                          type="error").text = reasons
        elif verdict == "inconclusive" or cell["status"] == "skipped":
            skipped += 1
            message = reasons or str(result.get("reason") or cell["status"])
            ET.SubElement(case, "skipped", message=message[:500])
        out = [f"speedup {_x(result.get('speedup'))}", f"{base}/runs/{run['id']}"]
        ET.SubElement(case, "system-out").text = "\n".join(out)
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_outputs(run: dict[str, Any], base: str, *, summary: Path | None,
                  junit_path: Path | None, json_path: Path | None) -> None:
    """The summary is appended (GitHub's step summary file collects every step's); the
    JUnit and JSON files are written whole."""
    if summary is not None:
        with summary.open("a", encoding="utf-8") as f:
            f.write(markdown(run, base))
    if junit_path is not None:
        junit_path.write_text(junit(run, base), encoding="utf-8")
    if json_path is not None:
        json_path.write_text(json.dumps(run, indent=2, sort_keys=True), encoding="utf-8")


# ---- speedwatch report --------------------------------------------------------------------

def compare_markdown(comparison: dict[str, Any], base_run: dict[str, Any],
                     head_run: dict[str, Any], url: str) -> str:
    lines = [
        f"### Speedwatch: {_md(head_run['project'])}: {_md(base_run['revision'])} -> "
        f"{_md(head_run['revision'])}",
        "",
        f"Runs [{base_run['id']}]({url}/runs/{base_run['id']}) -> "
        f"[{head_run['id']}]({url}/runs/{head_run['id']}) · speedup over PyTorch eager, "
        "95% CIs; CIs that do not overlap are the first sign of a real change.",
        "",
        "| series | base [95% CI] | head [95% CI] | change | CIs overlap |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in comparison["series"]:
        b, h = row["base"], row["head"]
        href = series_url(url, row["series_key"], head_run["project"])
        link = f"[{_md(row['series_key'])}]({href})"
        lines.append(
            f"| {link} | {b['speedup']:.2f}x [{b['ci_low']:.2f}, {b['ci_high']:.2f}] | "
            f"{h['speedup']:.2f}x [{h['ci_low']:.2f}, {h['ci_high']:.2f}] | "
            f"{'-' if row['change'] is None else format(row['change'] * 100, '+.1f') + '%'} | "
            f"{'yes' if row['ci_overlap'] else '**no**'} |")
    for side, keys in (("base", comparison["only_in_base"]), ("head", comparison["only_in_head"])):
        if keys:
            lines.append(f"\nOnly in {side}: {', '.join(_md(k) for k in keys)}")
    return "\n".join(lines) + "\n"


def _latest_finished(api: Api, project: str, revision: str) -> dict[str, Any]:
    page = api.get("/api/v1/runs", params={"project": project, "revision": revision,
                                          "limit": 50})
    for run in page.get("items", []):
        if run["status"] in ("done", "failed") and run["kind"] != "confirm":
            return api.run(int(run["id"]))
    raise ClientError(f"--base/--head: no finished run of revision {revision!r} in project "
                      f"{project!r}")


def report(
    url: str | None = typer.Option(None, envvar="SPEEDWATCH_URL",
                                   help="Server, e.g. http://host:8000 (or `url` in the "
                                   "project file)."),
    token: str | None = typer.Option(None, envvar="SPEEDWATCH_TOKEN",
                                     help="Token with the read scope (if reads are private)."),
    project: str | None = typer.Option(None, envvar="SPEEDWATCH_PROJECT",
                                       help="Project name (or `project` in the project "
                                       "file)."),
    base: str = typer.Option(..., help="Revision to compare against (its latest finished run)."),
    head: str | None = typer.Option(
        None, help="Revision to judge (its latest finished run); default: the revision "
        "`submit` measures here (the CI's commit variable, else git's HEAD)."),
    summary: Path | None = typer.Option(None, help="Append the Markdown table to this file."),
    config: Path | None = typer.Option(
        None, "--config", help="Project file (default: speedwatch.toml, or [tool.speedwatch] "
        "in pyproject.toml, as `submit` finds it); flags override it."),
) -> None:
    """Compare two revisions' latest finished runs series by series (Markdown on stdout)."""
    try:  # the same project file `submit` reads, so a CI step needs only --base and --head
        pf = project_file.load(config)
        url = project_file.required(pf.pick("url", url), "--url", "url", "SPEEDWATCH_URL")
        project = project_file.required(pf.pick("project", project), "--project", "project")
        head = project_file.revision(head, pf.root)
    except project_file.ProjectFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    assert url is not None and project is not None
    api = Api(url, token)
    try:
        base_run = _latest_finished(api, project, base)
        head_run = _latest_finished(api, project, head)
        comparison = api.get("/api/v1/compare",
                             params={"base": base_run["id"], "head": head_run["id"]})
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        api.close()
    text = compare_markdown(comparison, base_run, head_run, api.base)
    typer.echo(text)
    if summary is not None:
        with summary.open("a", encoding="utf-8") as f:
            f.write(text)
    disjoint = any(not row["ci_overlap"] and (row["change"] or 0) < 0
                   for row in comparison["series"])
    raise typer.Exit(EXIT_REGRESSION if disjoint else EXIT_PASS)


def register(cli: typer.Typer) -> None:
    cli.command("report", cls=Command, rich_help_panel="CI client")(report)

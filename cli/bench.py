"""`speedwatch bench`: measure a matrix of specs locally and print (or save) the results.

Comma-separated values in --model, --backend, --weights, --precision, --batch, --shape-mode and
--opt-level form a cross product, one spec per combination (benchmarks.matrix.build_matrix).
Each spec runs in its own child process by default (--isolate): a crash costs one row, and
torch.compile variants do not share dynamo's cache within one process.

--processes K measures each spec in K child processes, one after another, merged into one
result whose CI includes the between-process variance (benchmarks.stats.combine_processes).

--json writes a JSON array of result documents, one per spec, in matrix order (each is a
`BenchResult` document with its `schema_version`).

Exit codes: 0 when every spec is ok or skipped and every accuracy check passed, 1 when any
failed (including an accuracy failure), 2 for bad input (one line on stderr, no traceback).
torch is imported inside the command, so `speedwatch --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from benchmarks.matrix import (
    BadInput,
    build_matrix,
    failed,
    model_problem,
    parse_options,
    render_table,
    run_matrix,
)
from benchmarks.model_ref import BUILTIN_MODELS
from cli.extras import needs
from cli.help_format import Command
from cli.timing_flags import (
    TimingFlags,
    host_load_setting,
    timing_flag_problem,
    with_timing_flags,
)

MODEL_FORMS = ("a built-in model (" + ", ".join(BUILTIN_MODELS) + "), package.module:factory "
               "(importable here: the current directory, PYTHONPATH or SPEEDWATCH_MODEL_PATH), "
               "torchvision:NAME, timm:NAME or file:PATH.pt2 (a torch.export archive)")


def local_models(models: str) -> str:
    """`file:` paths made absolute: the children that measure may run elsewhere (another
    working directory), and a relative path would mean the model path there."""
    out = []
    for item in (v.strip() for v in models.split(",")):
        if item.startswith("file:") and not item.startswith("file:/"):
            item = "file:" + str(Path(item.removeprefix("file:")).absolute())
        out.append(item)
    return ",".join(out)


def specs_from_file(path: Path) -> list[Any]:
    """The spec (or list of specs) a JSON file holds, validated; BadInput naming --spec and
    the field, in one line.

    A spec file may come from someone else (a repro bundle holds a stored result's spec), so
    it meets the rules a stored spec meets: the result schema's types
    (benchmarks.result_schema.SpecDocument, so `options.threads` is a count, not text), then
    BenchSpec.validate (names, ranges, and the model rule: never the standard library)."""
    from pydantic import ValidationError

    from benchmarks.result_schema import SpecDocument, error_message, error_path
    from benchmarks.spec import BenchSpec, SpecError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"--spec: cannot read {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise BadInput(f"--spec: {str(path)!r} is not JSON: {exc}") from None
    items = data if isinstance(data, list) else [data]
    specs = []
    for i, item in enumerate(items):
        where = f"--spec ({path}{f' item {i + 1}' if len(items) > 1 else ''})"
        if not isinstance(item, dict):
            raise BadInput(f"{where}: a spec is a JSON object")
        try:
            SpecDocument.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise BadInput(f"{where}: {error_path(first['loc'])}: "
                           f"{error_message(first)}") from None
        try:
            spec = BenchSpec.from_dict(item)
            spec.validate()
        except (SpecError, TypeError, ValueError) as exc:
            raise BadInput(f"{where}: {_one_line(str(exc))}") from None
        specs.append(spec)
    return specs


def _one_line(text: str) -> str:
    """The first line of a message (a value quoted in it may hold a newline)."""
    lines = text.strip().splitlines()
    return lines[0] if lines else "invalid"


def register(cli: typer.Typer) -> None:
    @cli.command("bench", cls=Command, rich_help_panel="Measure here")
    @needs("bench", "bench")
    @with_timing_flags(more={
        "processes": "With --isolate: the CI then includes the variance between processes.",
        "builds": "A comma list measures the modes side by side."})
    def bench(
        model: str = typer.Option(
            "resnet50", help="Models, comma-separated: " + MODEL_FORMS + ". A relative "
            "file: path is taken from the current directory.", rich_help_panel="Matrix"),
        backend: str = typer.Option(
            "onnxruntime", help="Backends, comma-separated.", rich_help_panel="Matrix"),
        weights: str = typer.Option(
            "constant", help="constant, tensor, refit (comma list).", rich_help_panel="Matrix"),
        precision: str = typer.Option(
            "fp32", help="fp32, fp16, bf16 (comma list).", rich_help_panel="Matrix"),
        batch: str = typer.Option(
            "1", help="Batch sizes, comma-separated.", rich_help_panel="Matrix"),
        shape_mode: str = typer.Option(
            "static", "--shape-mode",
                                       help="static, dynamic (comma list).",
                                       rich_help_panel="Matrix"),
        opt_level: str = typer.Option(
            "default", "--opt-level", help="Optimization levels (comma list), each "
            "backend's own: onnxruntime disabled/basic/extended/layout/all, inductor "
            "max-autotune-no-cudagraphs/..., tensorrt and torch_tensorrt 0-5; default: "
            "the backend's default.", rich_help_panel="Matrix"),
        device: str = typer.Option(
            "cpu", help="cpu or cuda.", rich_help_panel="Matrix"),
        threads: int | None = typer.Option(
            None, min=0, help="CPU threads for both sides; default 1 on the CPU (as `submit` "
            "and `demo`, so a local run lands in the same series); 0: the library's default "
            "(all cores).", rich_help_panel="Matrix"),
        width: int = typer.Option(
            64, help="Stem width (64 = standard ResNet).", rich_help_panel="Matrix"),
        image_size: int = typer.Option(
            224, help="Input height and width.", rich_help_panel="Matrix"),
        num_classes: int = typer.Option(
            1000, min=1, help="Classifier outputs.", rich_help_panel="Matrix"),
        seed: int = typer.Option(
            0, help="Seed of weights, input and bootstrap.", rich_help_panel="Matrix"),
        isolate: bool = typer.Option(
            True, "--isolate/--no-isolate",
                                     help="Run each spec in its own child process.",
                                     rich_help_panel="Isolation and output"),
        timeout: float = typer.Option(
            600.0, min=1.0, help="Per-process timeout with --isolate.",
            rich_help_panel="Isolation and output"),
        threshold: float = typer.Option(
            0.03, min=0.001, max=0.5, help="The regression threshold the measurement must "
            "be precise enough to judge at.", rich_help_panel="Timing"),
        sides: str | None = typer.Option(
            None, help="split: each side timed alone in processes of its own (default on "
            "cpu with --isolate); paired: both sides in every process (default on cuda).",
            rich_help_panel="Matrix"),
        option: list[str] = typer.Option(
            [], "--option", help="Backend option key=value "
                                         "(repeatable; JSON values keep their type).",
                                         rich_help_panel="Matrix"),
        json_out: Path | None = typer.Option(
            None, "--json", help="Write results here.", rich_help_panel="Isolation and output"),
        spec_file: Path | None = typer.Option(
            None, "--spec", help="Measure the spec in this JSON file exactly (a result's "
            "`spec`, as `speedwatch repro` writes it); the matrix and timing flags are "
            "not read.", rich_help_panel="Matrix"),
        *,
        timing: TimingFlags,
    ) -> None:
        """Measure eager vs optimized backends, paired and interleaved; print a summary."""
        from dataclasses import replace

        from benchmarks.spec import BenchSpec
        from benchmarks.timing_policy import default_sides, default_timing, split_refused

        try:
            # a comma list of build modes is measured side by side (build_matrix)
            builds = timing.pop("builds")
            modes = [b.strip() for b in (builds or "").split(",") if b.strip()]
            for problem in [timing_flag_problem(**timing),
                            *(timing_flag_problem(builds=mode) for mode in modes)]:
                if problem is not None:
                    raise BadInput(problem)
            if timing["max_host_load"] is None:  # the service's setting, where the shell has one
                timing["max_host_load"] = host_load_setting()
            policy = replace(default_timing(device), **timing.given(), seed=seed)
            policy = replace(policy, min_rounds=min(policy.min_rounds, policy.rounds))
            processes = timing["processes"]
            if not isolate:
                if processes is not None and processes > 1:
                    raise BadInput("--processes > 1 needs --isolate: repeats inside one "
                                   "process share compile caches and are not independent")
                policy = replace(policy, processes=1, max_processes=0)
            options = parse_options(option)
            # One process cannot keep the sides apart: without isolation the default is paired.
            chosen = sides or str(options.get("sides") or (
                default_sides(device) if isolate else "paired"))
            if chosen not in ("paired", "split"):
                raise BadInput(f"--sides: {chosen!r} is not paired or split")
            options.pop("sides", None)
            if threads is None and device == "cpu" and "threads" not in options:
                threads = 1
            if threads:
                options["threads"] = threads
            refused = split_refused(chosen, device)
            if refused is not None:
                raise BadInput(f"--sides split with --device {device}: {refused}")
            if chosen == "split":
                if not isolate:
                    raise BadInput("--sides split times each side in processes of its own: "
                                   "it needs --isolate (or --sides paired)")
                options["sides"] = "split"
            base = BenchSpec(device=device, width=width, image_size=image_size,
                             num_classes=num_classes, seed=seed, options=options,
                             timing=policy)
            specs = (specs_from_file(spec_file) if spec_file is not None else build_matrix(
                models=local_models(model), backends=backend, weights=weights,
                precisions=precision, batches=batch, shapes=shape_mode, base=base,
                opt_levels=opt_level, builds=builds))
            if json_out is not None and json_out.parent and not json_out.parent.is_dir():
                raise BadInput(f"--json: directory {str(json_out.parent)!r} does not exist")
        except BadInput as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

        if not isolate and os.getcwd() not in sys.path:
            # a factory's package in the current directory imports as it does in the
            # isolated children (`python -m` puts their working directory first)
            sys.path.append(os.getcwd())
        results = run_matrix(specs, isolate=isolate, timeout_s=timeout, threshold=threshold)

        from rich.console import Console

        console = Console()
        if not console.is_terminal:
            console.width = max(console.width, 200)  # logs and pipes: do not truncate keys
        console.print(render_table(results))
        if json_out is not None:
            json_out.write_text(
                json.dumps([r.to_dict() for r in results], indent=1, allow_nan=False) + "\n",
                encoding="utf-8",
            )
            typer.echo(f"wrote {len(results)} result(s) to {json_out}")
        if any(failed(r) for r in results):
            raise typer.Exit(1)
        mistakes = list(dict.fromkeys(p for p in map(model_problem, results) if p))
        if mistakes:  # as `submit`: a cell the user's model kept from running is not a pass
            typer.echo(f"error: --model: {mistakes[0]}", err=True)
            raise typer.Exit(2)
        raise typer.Exit(0)

"""`speedwatch worker` and `speedwatch beat`: the Celery processes of a deployment."""

from __future__ import annotations

import os
import socket

import typer

from cli.extras import needs
from cli.help_format import Command


def register(cli: typer.Typer) -> None:
    cli.command("worker", cls=Command, rich_help_panel="Service")(needs("all", "worker")(worker))
    cli.command("beat", cls=Command, rich_help_panel="Service")(needs("server", "beat")(beat))


def worker(
    queues: str = typer.Option(
        "", "--queues", "-Q",
        help="Comma-separated queues to consume (default: the cpu queue). GPU hosts: "
        "gpu or a per-class queue from SPEEDWATCH_GPU_QUEUES.",
    ),
    concurrency: int = typer.Option(
        1, "--concurrency", "-c", min=1,
        help="Cells run at once. Keep 1 per GPU: parallel benchmarks disturb each other.",
    ),
    loglevel: str = typer.Option("INFO", "--loglevel", "-l"),
    hostname: str = typer.Option("", "--hostname", "-n", help="Worker node name."),
    gpus: str = typer.Option(
        "", "--gpus",
        help="all, or GPU indices such as 0,1: one worker process per GPU, each pinned to "
        "its device (CUDA_VISIBLE_DEVICES), concurrency 1, consuming its GPU class's queue "
        "(SPEEDWATCH_GPU_QUEUES) and the generic GPU queue; restarted if it dies."),
) -> None:
    """Start a Celery worker that runs benchmark cells from the given queues."""
    from cli.service import settings_or_exit

    # Before importing the Celery app, which reads the settings too: insecure production
    # settings end here with one line instead of a traceback.
    settings = settings_or_exit()
    _measurement_settings_or_exit()
    if gpus:
        _gpu_fleet(gpus, settings.gpu_queues, loglevel, queues, concurrency)
        return
    from kombu import Queue

    from app.services.workers import direct_queue
    from workers.celery_app import celery_app, queue_names
    from workers.fleet import FleetError, apply_worker_cores

    wanted = [q.strip() for q in queues.split(",") if q.strip()] or [settings.cpu_queue]
    known = queue_names(settings)
    unknown = [q for q in wanted if q not in known]
    if unknown:
        typer.echo(
            f"error: queue(s) {', '.join(unknown)} not configured; known: {', '.join(known)}",
            err=True,
        )
        raise typer.Exit(2)
    name = hostname or f"speedwatch-{'+'.join(wanted)}@{socket.gethostname()}"
    try:  # a fleet worker keeps to its share of the host's cores (workers.fleet)
        apply_worker_cores()
    except (FleetError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # Its own queue besides: where a confirmation is sent to be measured on this GPU.
    own = direct_queue(name)
    celery_app.conf.task_queues = [*celery_app.conf.task_queues, Queue(own, routing_key=own)]
    celery_app.worker_main(
        ["worker", "--queues", ",".join([*wanted, own]), "--concurrency", str(concurrency),
         "--loglevel", loglevel, "--hostname", name, "--without-gossip", "--without-mingle"]
    )


def _measurement_settings_or_exit() -> None:
    """A bad measurement variable ends the worker now, naming it, rather than failing its
    first cell later."""
    from benchmarks.process_settings import problems

    found = problems()
    for line in found:
        typer.echo(f"error: {line}", err=True)
    if found:
        raise typer.Exit(2)


def beat(
    loglevel: str = typer.Option("INFO", "--loglevel", "-l"),
    schedule: str = typer.Option(
        "", "--schedule", "-s",
        help="Beat's schedule state file (default: celerybeat-schedule in the var dir).",
    ),
) -> None:
    """Start Celery beat: it triggers the reconciler that re-sends or fails stuck cells."""
    import os
    import tempfile

    from cli.service import settings_or_exit

    settings_or_exit()
    from workers.celery_app import celery_app

    path = schedule or os.path.join(tempfile.gettempdir(), "speedwatch-celerybeat-schedule")
    celery_app.start(["beat", "--loglevel", loglevel, "--schedule", path])


def _gpu_fleet(selection: str, gpu_queues: dict[str, str], loglevel: str, queues: str,
               concurrency: int) -> None:
    """`--gpus`: plan one pinned worker per GPU from NVML, then supervise them."""
    from benchmarks.fingerprint import gpu_cpu_affinity, visible_gpus
    from workers.fleet import (
        FleetError,
        base_environment,
        format_cores,
        plan,
        supervise,
        worker_argv,
    )

    if queues or concurrency != 1:
        typer.echo("error: --gpus chooses each worker's queues and runs it with concurrency "
                   "1; leave out --queues and --concurrency", err=True)
        raise typer.Exit(2)
    try:
        gpus = visible_gpus()
        plans = plan(gpus, selection, gpu_queues, socket.gethostname(),
                     allowed=sorted(os.sched_getaffinity(0)),
                     affinity=gpu_cpu_affinity([int(g["index"]) for g in gpus]))
    except FleetError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for p in plans:
        typer.echo(f"GPU {p.index} ({p.name}, {p.device_class}): worker {p.hostname} on "
                   f"queues {', '.join(p.queues)}, cores "
                   f"{format_cores(p.cores) if p.cores else 'all'}")
    raise typer.Exit(supervise(plans, lambda p: worker_argv(p, loglevel), base_environment()))

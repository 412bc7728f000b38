"""Warm starts: a child forked from a server that imported the harness measures as a fresh
child does, starts in a fraction of the time, and fails the way a fresh child fails.

Real processes throughout (the server, its forks, the tiny CPU model); the CPU cells are
forked here only because the tests ask for it (`SPEEDWATCH_FORK_SERVER=1`)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import children, forkserver, isolation
from tests.benchmarks.conftest import make_tiny_spec


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(forkserver.FORK_ENV, "1")
    yield
    forkserver.close_all()


def _three_processes() -> object:
    spec = make_tiny_spec()
    return replace(spec, timing=replace(spec.timing, processes=3, max_processes=3))


def test_forked_children_measure_and_say_they_were_forked(forked: None) -> None:
    result = isolation.run_isolated(_three_processes(), timeout_s=120)  # type: ignore[arg-type]

    assert result.status == "ok", result.reason
    processes = result.evidence["processes"]
    assert [p["process_start"] for p in processes] == ["forked"] * 3
    # the imports were the server's: each child's start is its fork, not an interpreter's
    assert all(p["phases"]["start"] < 1.0 for p in processes)
    assert result.speedup is not None and result.speedup.value > 0


def test_fresh_children_are_the_default_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forkserver.FORK_ENV, raising=False)
    result = isolation.run_isolated(make_tiny_spec(), timeout_s=120)

    assert result.status == "ok", result.reason
    assert result.evidence["process_start"] == "fresh"
    assert not forkserver._SERVERS


@pytest.mark.parametrize(("fault", "reason"), [
    ("segfault", "killed by signal SIGSEGV"),
    ("raise", "RuntimeError: injected fault: raise"),
])
def test_a_forked_child_that_crashes_is_explained_as_a_fresh_one_is(
        forked: None, fault: str, reason: str) -> None:
    spec = make_tiny_spec(options={"threads": 1, "_fault": fault})
    result = isolation.run_isolated(spec, timeout_s=60,
                                    env={"SPEEDWATCH_ALLOW_FAULTS": "1"})

    assert result.status == "failed"
    assert reason in (result.reason or "")


def test_a_forked_child_that_hangs_is_killed_at_its_timeout(forked: None) -> None:
    spec = make_tiny_spec(options={"threads": 1, "_fault": "hang"})
    result = isolation.run_isolated(spec, timeout_s=6, env={"SPEEDWATCH_ALLOW_FAULTS": "1"})

    assert result.status == "failed"
    assert result.reason == "timed out after 6s"
    server = next(iter(forkserver._SERVERS.values()))
    assert server.alive()  # the server outlives the child it forked


def test_a_server_that_died_is_replaced_and_the_next_child_measures(forked: None) -> None:
    first = isolation.run_isolated(make_tiny_spec(), timeout_s=120)
    assert first.evidence["process_start"] == "forked"
    (server,) = forkserver._SERVERS.values()
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)

    second = isolation.run_isolated(make_tiny_spec(), timeout_s=120)

    assert second.status == "ok", second.reason
    assert second.evidence["process_start"] == "forked"
    (replacement,) = forkserver._SERVERS.values()
    assert replacement.proc.pid != server.proc.pid


def test_an_interpreter_that_cannot_serve_falls_back_to_a_fresh_start(
        forked: None, tmp_path: Path) -> None:
    # an interpreter whose server ends at once (a wrapper that refuses it) is no server:
    # the child then starts as it always did
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\n"
                       'case "$*" in *benchmarks.forkserver*) exit 3;; esac\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)

    started = time.monotonic()
    result = isolation.run_isolated(make_tiny_spec(), timeout_s=120, python=str(wrapper))

    assert result.status == "ok", result.reason
    assert result.evidence["process_start"] == "fresh"
    # a server that ended is noticed when its output ends, not after the wait for its
    # imports runs out (a race on its exit status once cost that whole wait)
    assert time.monotonic() - started < forkserver.READY_TIMEOUT_S / 2


def test_what_a_supervisor_sets_per_child_never_reaches_the_server() -> None:
    child_env = {"PATH": "/usr/bin", "SPEEDWATCH_PIN_CORES": "1",
                 "TORCHINDUCTOR_CACHE_DIR": "/tmp/x", "TRITON_CACHE_DIR": "/tmp/t",
                 "OMP_NUM_THREADS": "1"}

    assert forkserver.server_env(child_env) == {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize(("value", "device", "forks"), [
    ("auto", "cuda", True), ("auto", "cpu", False), ("", "cuda", True),
    ("1", "cpu", True), ("0", "cuda", False),
])
def test_the_setting_forks_gpu_children_by_default(value: str, device: str,
                                                   forks: bool) -> None:
    assert forkserver.setting(device, {forkserver.FORK_ENV: value}) is forks


def test_a_bad_setting_names_the_variable() -> None:
    with pytest.raises(ValueError, match="SPEEDWATCH_FORK_SERVER='yes'"):
        forkserver.setting("cuda", {forkserver.FORK_ENV: "yes"})


def test_the_server_never_touches_cuda() -> None:
    # forking after CUDA is initialised breaks the children's CUDA: the server imports the
    # harness, and importing it must not initialise a device
    import subprocess

    code = ("import benchmarks.runner, torch, sys; "
            "sys.exit(1 if torch.cuda.is_initialized() else 0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_server_also_imports_the_compiler_stack_and_leaves_its_environment_as_it_was(
        tmp_path: Path) -> None:
    # what a GPU child imports after the runner (dynamo, inductor) is imported once by the
    # server, with cache paths of its own that neither linger nor leak into the children's
    import subprocess

    code = (
        "import os, sys, benchmarks.runner, torch\n"
        "from benchmarks import forkserver\n"
        "before = dict(os.environ)\n"
        "forkserver._preload()\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
        "assert 'torch._dynamo' in sys.modules and 'torch._inductor.compile_fx' in sys.modules\n"
        "assert not torch.cuda.is_initialized()\n")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TMPDIR=str(tmp_path))
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=180, env=env)
    assert [p.name for p in tmp_path.iterdir()] == [], "the server's private caches lingered"


@pytest.mark.parametrize(("value", "preloads"), [("", True), ("1", True), ("0", False)])
def test_the_preload_is_on_unless_turned_off(value: str, preloads: bool) -> None:
    assert forkserver.preload_setting({forkserver.PRELOAD_ENV: value} if value else {}) \
        is preloads


def test_a_bad_preload_setting_names_the_variable() -> None:
    with pytest.raises(ValueError, match="SPEEDWATCH_FORK_PRELOAD='yes'"):
        forkserver.preload_setting({forkserver.PRELOAD_ENV: "yes"})


def test_a_server_whose_imports_initialised_cuda_starts_again_without_them(
        forked: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: a stand-in CUDA driver (a fake, named as such) whose cuDeviceGetCount
    # answers "initialised", as the real one does once an import has called cuInit. The
    # server must not fork from such a process: it starts again with the runner's imports
    # only, and the child still measures, forked.
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in driver")
    source = tmp_path / "fake_cuda.c"
    source.write_text("int cuDeviceGetCount(int *count) { *count = 1; return 0; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"),
                    str(source)], check=True, timeout=60)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))

    result = isolation.run_isolated(make_tiny_spec(), timeout_s=180)

    assert result.status == "ok", result.reason
    assert result.evidence["process_start"] == "forked"
    (server,) = forkserver._SERVERS.values()
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert f"{forkserver.PRELOAD_ENV}=0".encode() in environ


def test_a_server_started_ahead_serves_the_first_child_without_a_start_of_its_own(
        forked: None) -> None:
    # a worker starts it before its first cell arrives: the wait for the server's imports
    # is then spent before the run instead of in its first process
    assert children.start_fork_server("cpu", python=sys.executable, env=None, cwd=None)
    (ahead,) = forkserver._SERVERS.values()
    ahead.wait_ready()

    started = time.monotonic()
    result = isolation.run_isolated(make_tiny_spec(), timeout_s=120)

    assert result.status == "ok", result.reason
    assert result.evidence["process_start"] == "forked"
    assert list(forkserver._SERVERS.values()) == [ahead]  # the very server, no other
    assert time.monotonic() - started < 60


def test_no_server_is_started_ahead_for_children_that_start_fresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forkserver.FORK_ENV, raising=False)

    assert not children.start_fork_server("cpu", python=sys.executable, env=None, cwd=None)
    assert not forkserver._SERVERS

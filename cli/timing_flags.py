"""The timing flags `bench`, `submit` and `demo` share: their help and their checks, so the
three commands say the same thing and refuse the same values with one line naming the flag."""

from __future__ import annotations

COMPILE_CACHE_HELP = (
    '"process" (default: each process compiles afresh, so the CI covers what a new compile '
    'may choose) or "host" (processes share the worker\'s compile cache: runtime variance '
    "only, tighter and faster on a GPU).")
BUILDS_HELP = (
    '"pinned" (default: choices a compiler makes by timing, such as inductor\'s autotuning, '
    "are made deterministically or once per host, so a rebuild runs the same code) or "
    '"as-shipped" (each build times its own choices, as a production build does; the CI '
    "covers the spread between builds; a series of its own).")
MAX_HOST_LOAD_HELP = (
    "CPU cells: other processes' busy cores past which a unit is measured again (twice at "
    "most) and a load that stays is named in the verdict (default 0.5).")


def timing_flag_problem(*, compile_cache: str | None = None, builds: str | None = None,
                        max_host_load: float | None = None) -> str | None:
    """The first flag whose value cannot be used, as the one line to show; None if all can."""
    from benchmarks.build import BUILDS
    from benchmarks.spec import COMPILE_CACHES

    if compile_cache is not None and compile_cache not in COMPILE_CACHES:
        return f"--compile-cache: {compile_cache!r} is not {' or '.join(COMPILE_CACHES)}"
    if builds is not None and builds not in BUILDS:
        return f"--builds: {builds!r} is not {' or '.join(BUILDS)}"
    if max_host_load is not None and not 0 < max_host_load <= 4096:
        return f"--max-host-load: {max_host_load!r} is not a number of cores above 0"
    return None


def host_load_setting() -> float | None:
    """SPEEDWATCH_MAX_HOST_LOAD, the service's default for the load guard, where `bench`
    (which reads no service settings) finds it set; None: the measurement core's default."""
    import os

    raw = os.environ.get("SPEEDWATCH_MAX_HOST_LOAD")
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and 0 < value <= 4096 else None

"""A software identity says whether two measurements ran the same code, with no timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import identity
from tests.workers.wheels import install_beside

REPO = Path(__file__).resolve().parents[2]


def environment_of(extra_path: Path | None = None, **variables: str) -> dict[str, object]:
    """`python -m benchmarks.identity` in a fresh interpreter, as a worker asks it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEEDWATCH_FAULT")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), str(extra_path or "")) if p)
    env.update(variables)
    out = subprocess.run([sys.executable, "-m", "benchmarks.identity"], env=env, check=True,
                         capture_output=True, text=True, cwd=REPO)
    loaded: dict[str, object] = json.loads(out.stdout)
    return loaded


def test_the_same_environment_has_the_same_identity_in_every_process() -> None:
    first, second = environment_of(), environment_of()
    assert first["environment"] == second["environment"]
    assert first == second


def test_a_package_installed_beside_changes_the_identity_and_is_named(tmp_path: Path) -> None:
    """A real wheel installed by pip into a directory on the path: off the timed path, yet
    other software, so the identities differ and the difference names it."""
    target = install_beside(tmp_path, "swunrelated", "1.0")
    before, after = environment_of(), environment_of(target)
    assert before["environment"] != after["environment"]
    assert identity.differences(before, after) == ["+ swunrelated 1.0"]


def test_a_rebuilt_distribution_of_the_same_version_is_other_software(tmp_path: Path) -> None:
    """Same version number, other files: the RECORD hash tells them apart."""
    sites = []
    for n, slow in enumerate((0.0, 0.5)):
        target = install_beside(tmp_path / f"release{n}", "swrebuilt", "2.0",
                                slow_candidate=slow)
        sites.append(environment_of(target))
    assert sites[0]["environment"] != sites[1]["environment"]
    assert identity.differences(sites[0], sites[1]) == ["swrebuilt 2.0 rebuilt"]


def test_a_variable_that_changes_what_runs_is_part_of_the_identity() -> None:
    plain = environment_of()
    threads = environment_of(OMP_NUM_THREADS="3")
    assert plain["environment"] != threads["environment"]
    assert identity.differences(plain, threads) == ["the environment variables"]


def test_model_and_build_complete_the_identity() -> None:
    env = identity.environment_identity()
    a = identity.software_identity(env, model="m1", build="b1")
    assert a == identity.software_identity(env, model="m1", build="b1")
    assert a["digest"] != identity.software_identity(env, model="m1", build="b2")["digest"]
    assert a["digest"] != identity.software_identity(env, model="m2", build="b1")["digest"]
    assert identity.with_build(a, "b2")["digest"] == \
        identity.software_identity(env, model="m1", build="b2")["digest"]
    assert identity.differences(a, identity.with_build(a, "b2")) == ["the build"]


def test_the_distributions_a_process_loaded_are_those_importlib_names_for_its_modules() -> None:
    """The side's software is the distributions its process imported code from. Read from
    the RECORDs the identity already reads, it must name what importlib's own
    `packages_distributions()` names for the modules loaded, in this very environment."""
    from importlib import metadata

    import numpy  # noqa: F401  (something installed, surely loaded)

    dists = identity.distributions()
    top = {name.split(".")[0] for name in list(sys.modules)}
    owners = metadata.packages_distributions()
    expected = {identity._normalize(d) for module in top for d in owners.get(module, [])}
    loaded = identity.loaded_distributions(dists)
    assert "numpy" in loaded
    assert set(loaded) == {name for name in dists if name in expected}


def test_a_process_that_never_imports_a_package_does_not_count_it_loaded(
        tmp_path: Path) -> None:
    target = install_beside(tmp_path, "swunrelated", "1.0")
    script = ("import json, sys\nfrom benchmarks import identity\n"
              "if sys.argv[1] == 'import':\n    import swunrelated\n"
              "print(json.dumps(sorted(identity.loaded_distributions())))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(target)))}
    runs = {how: json.loads(subprocess.run([sys.executable, "-c", script, how], env=env,
                                           check=True, capture_output=True, text=True,
                                           cwd=REPO).stdout)
            for how in ("import", "leave")}
    assert "swunrelated" in runs["import"] and "swunrelated" not in runs["leave"]

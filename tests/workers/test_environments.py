"""Environments: what a trigger may ask a worker to install, and how venvs are cached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.environment_policy import PinError, normalize_name, validate_pins
from workers import environments
from workers.environments import cache_key, installed_versions, materialize

ALLOW = ["onnxruntime", "torch", "torch-tensorrt", "six", "numpy"]

MALICIOUS = [
    # pip options smuggled as a "pin"
    "-e git+https://example.com/evil.git#egg=onnxruntime",
    "--index-url=https://evil.example/simple",
    "-i https://evil.example/simple",
    "--extra-index-url https://evil.example/simple",
    "--trusted-host evil.example",
    "-r /etc/passwd",
    "--pre",
    # URLs and paths
    "onnxruntime @ https://evil.example/onnxruntime.whl",
    "https://evil.example/onnxruntime-1.22.0.whl",
    "file:///tmp/onnxruntime-1.22.0.whl",
    "/tmp/onnxruntime-1.22.0.whl",
    "./onnxruntime",
    "../onnxruntime",
    "git+https://example.com/onnxruntime",
    # extras, markers, other specifiers
    "onnxruntime[extra]==1.22.0",
    "onnxruntime==1.22.0; python_version>'3'",
    "onnxruntime==1.22.0 ; sys_platform=='linux'",
    "onnxruntime>=1.22.0",
    "onnxruntime~=1.22",
    "onnxruntime===1.22.0",
    "onnxruntime==1.*",
    "onnxruntime!=1.22.0",
    "onnxruntime",
    "onnxruntime==",
    "==1.22.0",
    # whitespace and shell metacharacters
    "onnxruntime ==1.22.0",
    "onnxruntime==1.22.0 --index-url=https://evil.example",
    "onnxruntime==1.22.0\n--index-url=https://evil.example",
    "onnxruntime==1.22.0\t",
    "onnxruntime==1.22.0$(touch /tmp/pwned)",
    "onnxruntime==1.22.0`id`",
    "onnxruntime==1.22.0|sh",
    "onnxruntime==1.22.0&&id",
    "onnxruntime==1.22.0>out",
    "onnxruntime==1.22.0#egg",
    "onnxruntime==1.22.0\\",
    # look-alike characters and non-ASCII digits
    "onnxruntime==\u0661.22.0",
    "onnxrunt\u0456me==1.22.0",  # Cyrillic i
    "onnxruntime==1.22.0\x00",
    "",
    " ",
    "-",
    "a" * 200 + "==1.0",
]


@pytest.mark.parametrize("pin", MALICIOUS)
def test_refused_pins_raise_before_anything_runs(pin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a subprocess started for refused pin {pin!r}: {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    with pytest.raises(PinError) as info:
        validate_pins([pin], ALLOW)
    assert "pin" in str(info.value)
    with pytest.raises(PinError):
        materialize([pin], allowlist=ALLOW, cache_dir="/nonexistent/never-created")
    assert not Path("/nonexistent/never-created").exists()


@pytest.mark.parametrize(
    ("pin", "words"),
    [
        ("--index-url=https://evil.example", "options"),
        ("https://evil.example/x.whl", "URLs and paths"),
        ("onnxruntime[gpu]==1.22.0", "extras"),
        ("onnxruntime==1.22.0;os_name=='nt'", "markers"),
        ("onnxruntime >=1.0", "whitespace"),
        ("onnxruntime==1.0$(id)", "shell metacharacters"),
        ("onnxruntime>=1.0", "name==version"),
    ],
)
def test_refusal_message_says_why(pin: str, words: str) -> None:
    with pytest.raises(PinError) as info:
        validate_pins([pin], ALLOW)
    assert words in str(info.value)
    assert repr(pin) in str(info.value)


def test_package_must_be_on_the_allowlist() -> None:
    with pytest.raises(PinError, match="not on the allowlist"):
        validate_pins(["requests==2.32.0"], ALLOW)


def test_a_single_string_is_not_a_list_of_pins() -> None:
    with pytest.raises(PinError, match="list"):
        validate_pins("onnxruntime==1.22.0", ALLOW)  # type: ignore[arg-type]


def test_the_same_package_pinned_twice_at_different_versions_is_refused() -> None:
    with pytest.raises(PinError, match="pinned twice"):
        validate_pins(["onnxruntime==1.22.0", "ONNXRuntime==1.21.0"], ALLOW)


def test_valid_pins_are_normalised_and_sorted() -> None:
    pins = ["Torch_TensorRT==2.7.0", "onnxruntime==1.22.0", "torch==2.7.0+cu126",
            "numpy==2.1.0rc1", "six==1.16.0.post1"]
    assert validate_pins(pins, ALLOW) == [
        "numpy==2.1.0rc1", "onnxruntime==1.22.0", "six==1.16.0.post1", "torch==2.7.0+cu126",
        "torch-tensorrt==2.7.0",
    ]


def test_allowlist_entries_are_normalised_too() -> None:
    assert validate_pins(["torch-tensorrt==2.7.0"], ["Torch_TensorRT"]) == [
        "torch-tensorrt==2.7.0"
    ]


def test_normalize_name_follows_pep_503() -> None:
    assert normalize_name("Torch_TensorRT") == "torch-tensorrt"
    assert normalize_name("a.b__c--d") == "a-b-c-d"


def test_cache_key_ignores_order_and_is_stable() -> None:
    a = cache_key(validate_pins(["torch==2.7.0", "onnxruntime==1.22.0"], ALLOW))
    b = cache_key(validate_pins(["ONNXRuntime==1.22.0", "torch==2.7.0"], ALLOW))
    assert a == b
    # the same inputs give the same key in a fresh interpreter (no hash randomisation)
    code = (
        "from app.environment_policy import validate_pins;"
        "from workers.environments import cache_key;"
        "print(cache_key(validate_pins(['torch==2.7.0','onnxruntime==1.22.0'],"
        "['torch','onnxruntime'])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == a


def test_cache_key_changes_with_any_version_or_the_python() -> None:
    base = cache_key(["onnxruntime==1.22.0"])
    assert cache_key(["onnxruntime==1.22.1"]) != base
    assert cache_key(["onnxruntime==1.22.0", "torch==2.7.0"]) != base
    assert cache_key(["onnxruntime==1.22.0"], python="cpython-3.12.1--linux") != base


def test_no_pins_means_the_workers_own_interpreter(tmp_path: Path) -> None:
    assert materialize([], allowlist=ALLOW, cache_dir=tmp_path) == sys.executable
    assert list(tmp_path.iterdir()) == []


def test_installed_versions_of_the_worker_interpreter_lists_what_it_imports() -> None:
    import torch

    versions = installed_versions(sys.executable)
    assert versions["torch"] == torch.__version__


def _pypi_reachable() -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--dest", "/tmp/speedwatch-pip-probe", "six==1.16.0", "--quiet"],
        capture_output=True, timeout=120, check=False,
    )
    return proc.returncode == 0


@pytest.mark.slow
def test_materialize_builds_one_cached_venv_with_the_pin_and_the_benchmarks_package(
    tmp_path: Path,
) -> None:
    if not _pypi_reachable():
        pytest.skip("the package index is not reachable from here (six==1.16.0)")
    python = materialize(["six==1.16.0"], allowlist=["six"], cache_dir=tmp_path)
    venv = Path(python).parent.parent
    assert venv.parent == tmp_path
    assert venv.name == cache_key(["six==1.16.0"])
    probe = subprocess.run(
        [python, "-c", "import six, benchmarks.spec, torch; print(six.__version__)"],
        capture_output=True, text=True, check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "1.16.0"
    recorded = json.loads((venv / "installed.json").read_text())
    assert recorded["six"] == "1.16.0"
    assert installed_versions(python)["six"] == "1.16.0"
    # no build directory is left behind, and a second call reuses the venv without pip
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".build")] == []
    mtime = (venv / "installed.json").stat().st_mtime_ns
    assert materialize(["six==1.16.0"], allowlist=["six"], cache_dir=tmp_path) == python
    assert (venv / "installed.json").stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_a_version_that_does_not_exist_fails_with_pips_reason_and_leaves_no_venv(
    tmp_path: Path,
) -> None:
    if not _pypi_reachable():
        pytest.skip("the package index is not reachable from here (six==1.16.0)")
    with pytest.raises(environments.EnvironmentBuildError, match=r"six==0\.0\.1"):
        materialize(["six==0.0.1"], allowlist=["six"], cache_dir=tmp_path)
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


def test_pips_error_as_a_cell_shows_it_hides_index_credentials_and_the_index_listing() -> None:
    from workers.environments import redacted

    stderr = ("Looking in indexes: https://ci:s3cret@mirror.example/simple\n"
              "ERROR: Could not find a version that satisfies the requirement "
              "onnxruntime==9.9 (from versions: 1.16.0, 1.17.1, 1.22.0)\n"
              "ERROR: No matching distribution found for onnxruntime==9.9")
    shown = redacted(stderr)
    assert "s3cret" not in shown and "https://***@mirror.example/simple" in shown
    assert "(from versions: 3 on the index)" in shown and "1.17.1" not in shown
    assert "onnxruntime==9.9" in shown  # what the user asked for stays
    assert "(from versions: none)" in redacted("x (from versions: none)")


def test_the_package_index_is_read_once_a_minute_per_package_and_pip_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real pip reading a directory of real wheels: a second sweep request within the
    minute is answered from the first's reading (a release added meanwhile is not yet
    seen), a minute later pip is asked again, and another pip configuration is its own."""
    from app.config import Settings
    from tests.workers.wheels import use_only, write_releases

    write_releases(tmp_path / "a", "swcached", ["1.0", "1.1"], {})
    use_only(monkeypatch, tmp_path / "a")
    now = [0.0]
    index = environments.PipPackageIndex(ttl_s=60.0, clock=lambda: now[0])
    settings = Settings(database_url="sqlite://")
    assert sorted(index.versions("swcached", pre=False, settings=settings)) == ["1.0", "1.1"]
    write_releases(tmp_path / "a", "swcached", ["1.2"], {})
    now[0] = 59.0
    assert sorted(index.versions("swcached", pre=False, settings=settings)) == ["1.0", "1.1"]
    now[0] = 61.0
    assert sorted(index.versions("swcached", pre=False, settings=settings)) == [
        "1.0", "1.1", "1.2"]
    write_releases(tmp_path / "b", "swcached", ["2.0"], {})
    use_only(monkeypatch, tmp_path / "b")
    assert index.versions("swcached", pre=False, settings=settings) == ["2.0"]

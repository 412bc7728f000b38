"""The files of a repro bundle: what `speedwatch repro` writes and the dashboard serves as
an archive (a stored result's spec, environment, fingerprint, document and the exact
commands that measure it again)."""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from typing import Any


def bundle_files(result: dict[str, Any], url: str | None) -> dict[str, str]:
    """The bundle's files by name (text), from `GET /api/v1/results/{id}`; `url` is the
    server's address as its operator configured it (or as the user typed it), None when
    there is none to name."""
    document = result["document"]
    spec = document["spec"]
    pins = list(result.get("pins") or [])
    interpreter = result.get("interpreter")
    speedup = document.get("speedup") or {}
    fingerprint = document.get("fingerprint") or {}
    extra = "bench" if spec.get("backend") in ("eager", "inductor", "onnxruntime") else "all"
    package = f'"${{SPEEDWATCH_PACKAGE:-speedwatch[{extra}]}}"'
    install = "pip install " + " ".join([package, *(shlex.quote(p) for p in pins)])
    lines = [
        "#!/usr/bin/env bash",
        f"# Measures result {result['result_id']} of {result['project']} @ "
        f"{result['revision']} again, here.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "# SPEEDWATCH_PACKAGE: where speedwatch comes from when not from your index (a",
        f"# checkout: SPEEDWATCH_PACKAGE='/path/to/speedwatch[{extra}]')",
        install,
        "speedwatch bench --spec spec.json --json reproduced.json",
    ]
    if interpreter:
        lines.insert(4, f"# the cell ran in the worker's interpreter {interpreter!r}: "
                        "use one with the same packages (environment.json) instead of pins")
    stored = (f"{speedup['value']:.3f}x [{speedup['ci_low']:.3f}, {speedup['ci_high']:.3f}]"
              if speedup else f"no speedup ({document.get('status')}: "
                              f"{document.get('reason')})")
    where = ", ".join(str(fingerprint[k]) for k in ("device_class", "gpu", "cpu", "hostname")
                      if fingerprint.get(k))
    readme = "\n".join([
        f"# Reproduce result {result['result_id']}",
        "",
        f"Series `{result['series_key']}`, project {result['project']}, revision "
        f"{result['revision']}, run {result['run_id']} on "
        f"{url or 'the Speedwatch server that stored it'}.",
        "",
        f"Stored: {stored} on {where or 'an unrecorded machine'}.",
        "",
        "```bash",
        "bash repro.sh   # a virtualenv with the same pins, then the exact spec",
        "```",
        "",
        "`reproduced.json` then holds the speedup measured here; inside the stored "
        "interval means this machine sees what the worker saw. `spec.json` is the cell "
        "(model, backend, weights, precision, batch, options, timing), `environment.json` "
        "what it ran in, `fingerprint.json` where, `result.json` the stored result.",
        "",
    ])
    environment = {"pins": pins, "interpreter": interpreter,
                   "installed": result.get("installed") or {}}
    return {
        "spec.json": json.dumps(spec, indent=1, sort_keys=True) + "\n",
        "environment.json": json.dumps(environment, indent=1, sort_keys=True) + "\n",
        "fingerprint.json": json.dumps(fingerprint, indent=1, sort_keys=True) + "\n",
        "result.json": json.dumps(document, indent=1) + "\n",
        "repro.sh": "\n".join(lines) + "\n",
        "README.md": readme,
    }


def archive(result: dict[str, Any], url: str | None) -> bytes:
    """The bundle as a .tar.gz whose files sit in repro-RESULT_ID/."""
    buffer = io.BytesIO()
    folder = f"repro-{result['result_id']}"
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in bundle_files(result, url).items():
            data = text.encode()
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()

"""On a GPU host: a foreign process started on the worker's GPU during a cell is caught, the
cell is not stored but measured again, and the second attempt (alone on the GPU) is stored.

Runs the worker's own task body (workers.execution.execute_cells) on a SQLite store, pinned to
GPU 0 as `speedwatch worker --gpus` pins it; the foreign load is a matmul loop in a process
of its own, started a few seconds into the cell. Prints what happened and writes JSON.

Usage: bash scripts/gpu_run python3 scripts/gpu_exclusivity.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # pinned, as the fleet pins each worker
os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
work = Path(tempfile.mkdtemp())
os.environ["SPEEDWATCH_DATABASE_URL"] = f"sqlite:///{work / 'sw.db'}"
os.environ["SPEEDWATCH_EXECUTOR"] = "none"
os.environ["SPEEDWATCH_ENVIRONMENT"] = "development"
os.environ["SPEEDWATCH_VENV_CACHE_DIR"] = str(work / "venvs")

FOREIGN = ("import torch, time; x = torch.randn(8192, 8192, device='cuda', dtype=torch.float16);"
           "end = time.time() + 25\nwhile time.time() < end: y = x @ x\n"
           "torch.cuda.synchronize()")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from app.config import get_settings
    from app.db import session_scope, upgrade
    from app.models import Cell, Result
    from app.schemas import RunCreate
    from app.services.triggering import create_run
    from workers.execution import execute_cells

    settings = get_settings()
    upgrade(settings.database_url)
    request = RunCreate.model_validate({
        "project": "exclusivity", "revision": "r1", "environment": {"pins": []},
        "matrix": {"models": ["resnet50"], "backends": ["inductor"], "weights": ["constant"],
                   "precisions": ["fp16"], "batch_sizes": [1], "device": "cuda",
                   "timing": {"processes": 3, "max_processes": 3, "max_seconds": 2.0}}})
    with session_scope(settings) as session:
        run, _ = create_run(session, request, settings=settings)
        [cell_id] = [c.id for c in run.cells]

    foreign: dict[str, object] = {}

    def start_foreign(after_s: float) -> None:
        """Someone else's process: started through a shell that exits at once, so the load
        is reparented to init and is no descendant of this worker (a child of ours would be
        one of the worker's own processes)."""
        time.sleep(after_s)
        pid_file = work / "foreign.pid"
        script = work / "foreign.py"
        script.write_text(FOREIGN)
        subprocess.run(["setsid", "bash", "-c",
                        f"{sys.executable} {script} & echo $! > {pid_file}"], check=True)
        pid = int(pid_file.read_text())
        foreign.update(pid=pid, started_after_s=after_s)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.5)

    attempts = []
    loader = threading.Thread(target=start_foreign, args=(15.0,), daemon=True)
    loader.start()
    t0 = time.monotonic()
    first = execute_cells([cell_id], settings)[cell_id]
    with session_scope(settings) as session:
        cell = session.get(Cell, cell_id)
        assert cell is not None
        attempts.append({"outcome": first, "status": cell.status, "error": cell.error,
                         "seconds": round(time.monotonic() - t0, 1)})
    loader.join()
    t0 = time.monotonic()
    second = execute_cells([cell_id], settings)[cell_id]
    with session_scope(settings) as session:
        cell = session.get(Cell, cell_id)
        assert cell is not None
        result = session.query(Result).filter(Result.cell_id == cell_id).one_or_none()
        attempts.append({"outcome": second, "status": cell.status, "error": cell.error,
                         "seconds": round(time.monotonic() - t0, 1),
                         "speedup": None if result is None else
                         [result.speedup, result.ci_low, result.ci_high]})
    report = {"foreign": foreign, "attempts": attempts}
    (out / "exclusivity.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

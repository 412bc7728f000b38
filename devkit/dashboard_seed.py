"""A realistic history for the dashboard: browser tests, screenshots and the demo of pages.

Everything goes through the real ingest path (`ingest_result`), so detection judges each
result as it would in production: the tensor-weights series of Torch-TensorRT loses fusion
when torch-tensorrt moves to 2.7.0 (kernels per inference 58 -> 161), detection opens a
regression with its evidence sentence, and the change point shows on the chart, while the
constant-weights series beside it holds. Timestamps are spread over days afterwards, so
hover texts and sparklines read like a real history.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.models import Cell, Regression, Result, Run
from app.schemas import ResultIngest, RunCreate
from app.services.results import ingest_result
from app.services.runs import finish_run_if_complete
from app.services.triggering import create_run
from benchmarks.result import Accuracy, BenchResult, LatencySummary, Speedup
from benchmarks.spec import BenchSpec

DEVICE = "nvidia-h200"
PROJECT = "vision"
# (revision, torch-tensorrt version): four releases of history, the regression at 2.7.0
REVISIONS = [(f"r{100 + i}", "2.5.0" if i < 5 else "2.6.0" if i < 10 else "2.7.0")
             for i in range(16)]
START = datetime(2026, 10, 1, 9, 30, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Track:
    """One series' story: its speedup at each revision, and its fusion evidence."""

    spec: BenchSpec
    eager_ms: float
    speedup: float
    drop_at_27: float = 0.0  # relative speedup loss from torch-tensorrt 2.7.0 on
    kernels: int = 58
    kernels_after_drop: int = 58
    trend: float = 0.0  # relative gain per revision


def _spec(model: str, backend: str, weights: str, precision: str, batch: int) -> BenchSpec:
    return BenchSpec(model=model, backend=backend, weights=weights, precision=precision,
                     batch_size=batch, device="cuda")


TRACKS = [
    Track(_spec("resnet50", "torch_tensorrt", "constant", "fp16", 1), 4.10, 3.15),
    Track(_spec("resnet50", "torch_tensorrt", "tensor", "fp16", 1), 4.10, 2.95,
          drop_at_27=0.36, kernels_after_drop=161),
    Track(_spec("resnet50", "onnxruntime", "constant", "fp32", 8), 9.80, 1.62, kernels=122),
    Track(_spec("resnet50", "onnxruntime", "tensor", "fp32", 8), 9.80, 1.48, kernels=175),
    Track(_spec("resnet18", "inductor", "constant", "fp16", 32), 6.30, 2.05, kernels=41,
          trend=0.006),
    Track(_spec("resnet101", "tensorrt", "constant", "fp16", 1), 7.90, 3.60, kernels=96),
]
# A series with results that never measured (TensorRT unavailable on that worker).
SKIPPED = _spec("resnet101", "tensorrt", "refit", "fp16", 1)

ROUNDS, PER_ROUND = 6, 12


@dataclass(frozen=True)
class Seeded:
    regression_id: int
    regressed_key: str
    steady_key: str
    skipped_key: str
    run_ids: list[int]
    queued_run_id: int


def document(track: Track, index: int, trt_version: str, rng: random.Random) -> BenchResult:
    """A result document whose raw samples agree with its speedup (detection reads them)."""
    dropped = trt_version == "2.7.0" and track.drop_at_27 > 0
    speedup = track.speedup * (1 + track.trend * index) * (1 - track.drop_at_27 * dropped)
    speedup *= rng.gauss(1.0, 0.012)
    eager = track.eager_ms * rng.gauss(1.0, 0.01)
    candidate = eager / speedup
    base_rounds = [[round(eager * rng.gauss(1, 0.015), 4) for _ in range(PER_ROUND)]
                   for _ in range(ROUNDS)]
    cand_rounds = [[round(candidate * rng.gauss(1, 0.015), 4) for _ in range(PER_ROUND)]
                   for _ in range(ROUNDS)]
    n = ROUNDS * PER_ROUND

    def summary(median: float) -> LatencySummary:
        return LatencySummary(n, median, median * 0.02, median * 0.97, median * 1.04, median)

    half_width = speedup * rng.uniform(0.018, 0.03)
    kernels = track.kernels_after_drop if dropped else track.kernels
    return BenchResult(
        series_key=track.spec.series_key(DEVICE), spec=track.spec.to_dict(), status="ok",
        baseline_samples_ms=base_rounds, candidate_samples_ms=cand_rounds,
        baseline=summary(eager), candidate=summary(candidate),
        speedup=Speedup(speedup, speedup - half_width, speedup + half_width),
        accuracy=Accuracy(rel_l2=2e-4, max_abs=3e-3, tolerance=1e-2, passed=True),
        compile_seconds=round(rng.uniform(38, 44), 1),
        evidence={"kernels_per_inference": kernels, "trt_layer_count": kernels - 12},
        fingerprint={"device_class": DEVICE, "gpu": "NVIDIA H200", "driver": "570.86.15",
                     "cuda": "12.8", "python": "3.11.7",
                     "packages": {"torch": "2.7.0" if trt_version == "2.7.0" else "2.6.0",
                                  "torch-tensorrt": trt_version, "tensorrt": "10.9.0"}},
    )


def _ingest(revision: str, trt: str, result: BenchResult) -> ResultIngest:
    return ResultIngest.model_validate({
        "project": PROJECT, "revision": revision, "branch": "main",
        "environment": {"pins": [f"torch-tensorrt=={trt}"]}, "result": result.to_dict()})


def seed(session: Session, settings: Settings) -> Seeded:
    """Fill the (empty) store with the history above; commits."""
    rng = random.Random(5)
    run_ids = []
    for index, (revision, trt) in enumerate(REVISIONS):
        when = START + timedelta(days=index, hours=rng.uniform(0, 3))
        run_id = 0
        for track in TRACKS:
            body = _ingest(revision, trt, document(track, index, trt, rng))
            stored, _ = ingest_result(session, body, settings)
            run_id = stored.run_id
        if index % 5 == 0:
            skipped = BenchResult(series_key=SKIPPED.series_key(DEVICE), spec=SKIPPED.to_dict(),
                                  status="skipped",
                                  reason="tensorrt: refittable engines need TensorRT >= 10 "
                                         "on this worker", fingerprint={"device_class": DEVICE})
            ingest_result(session, _ingest(revision, trt, skipped), settings)
        session.commit()
        finish_run_if_complete(session, run_id)  # the API judges after its response
        session.commit()
        session.execute(update(Run).where(Run.id == run_id).values(
            created_at=when, started_at=when, finished_at=when + timedelta(minutes=3)))
        session.execute(update(Result).where(Result.run_id == run_id).values(created_at=when))
        session.execute(update(Regression).where(Regression.opened_by_run_id == run_id)
                        .values(created_at=when + timedelta(minutes=3)))
        session.execute(update(Regression).where(Regression.resolved_by_result_id.in_(
            select(Result.id).where(Result.run_id == run_id)))
            .values(resolved_at=when + timedelta(minutes=3)))
        session.commit()
        run_ids.append(run_id)
    queued, _ = create_run(session, RunCreate.model_validate({
        "project": PROJECT, "revision": "r116", "branch": "main", "trigger": "ci",
        "environment": {"pins": ["onnxruntime==1.22.0"]},
        "matrix": {"models": ["resnet50"], "backends": ["onnxruntime"],
                   "weights": ["constant", "tensor"], "device": "cpu"},
    }), settings=settings)
    session.commit()
    regressed = TRACKS[1].spec.series_key(DEVICE)
    regression = session.scalars(select(Regression).where(Regression.status == "open")).first()
    assert regression is not None, "seed: detection opened no regression"
    assert regression.series.key == regressed
    assert session.scalars(select(Cell).where(Cell.run_id == queued.id)).first() is not None
    return Seeded(regression_id=regression.id, regressed_key=regressed,
                  steady_key=TRACKS[0].spec.series_key(DEVICE),
                  skipped_key=SKIPPED.series_key(DEVICE), run_ids=run_ids,
                  queued_run_id=queued.id)

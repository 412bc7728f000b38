"""series identity: a series belongs to a project; its key holds threads, timing mode and
measurement options

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 09:00:00

Before: one series per 7-segment key (model/backend/weights/precision/bsN/shape/device),
shared by every project, so one project's run became another's `latest` and baseline, and a
CUDA-graph result and a later one without graphs (or t1 and the library's threads) landed
in one history. After: series.project_id, the unique pair (project_id, key), and keys of
benchmarks.spec.series_key (9 or 10 segments: .../tN|tauto/graphs|nographs[/options]).

Upgrade re-keys every stored result, in batches of BATCH (100k results are fine):
- new key = BenchSpec.from_dict(cell.spec).series_key(device_class, timing_mode), with the
  device class of the result's fingerprint (else the old key's), and the timing mode the
  result was measured with (`timing_mode` below, the rule of BenchResult.timing_mode);
- one series per (project of the result's run, new key); the result points at it and its
  cell's series_key becomes the new key;
- a cell without a result gets the key its spec asks for on the old key's device class;
- a regression moves to the series of the result that opened it (if two active ones of a
  project land on one series, which only keys already in the new format can cause, the
  newest stays active and the others are resolved);
- projects.detection.series_thresholds: an old key's threshold goes to every new key of that
  project derived from it; a key with nothing derived in that project is kept as it was;
- the old series rows are deleted (nothing refers to them any more); a series that had no
  result at all has no project and is not carried over.
No result is deleted or changed other than its series_id.

Downgrade (best effort): keys are cut back to their first 7 segments and series with the
same cut key are merged across projects and timing modes (the oldest row survives). Where
that puts two active regressions of a project on one series, the newest stays active and
the others are resolved. A threshold of several new keys that cut to one old key keeps the
lowest. Threads, timing mode, options and the project of a series are lost.

The key rules are re-stated below as they were at this revision (benchmarks.spec then);
the migration imports no product code, so a later change to the spec cannot change what
it does to an old store.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
BATCH = 500  # rows per read; also bounds an IN list (old SQLite allows 999 parameters)
TIMING_MODES = ("graphs", "nographs")
OLD_SEGMENTS = 7
ACTIVE = ("open", "acknowledged")

series = sa.table(
    "series",
    sa.column("id", sa.Integer), sa.column("project_id", sa.Integer),
    sa.column("key", sa.String), sa.column("model", sa.String),
    sa.column("backend", sa.String), sa.column("weights", sa.String),
    sa.column("precision", sa.String), sa.column("batch_size", sa.Integer),
    sa.column("shape_mode", sa.String), sa.column("device_class", sa.String),
    sa.column("threads", sa.Integer), sa.column("timing_mode", sa.String),
    sa.column("options", sa.String), sa.column("created_at", sa.DateTime(timezone=True)),
)
results = sa.table(
    "results",
    sa.column("id", sa.Integer), sa.column("cell_id", sa.Integer),
    sa.column("run_id", sa.Integer), sa.column("series_id", sa.Integer),
    sa.column("evidence", JSON_TYPE), sa.column("fingerprint", JSON_TYPE),
)
cells = sa.table(
    "cells",
    sa.column("id", sa.Integer), sa.column("run_id", sa.Integer),
    sa.column("spec", JSON_TYPE), sa.column("series_key", sa.String),
)
runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("project_id", sa.Integer))
projects = sa.table("projects", sa.column("id", sa.Integer),
                    sa.column("detection", JSON_TYPE))
regressions = sa.table(
    "regressions",
    sa.column("id", sa.Integer), sa.column("project_id", sa.Integer),
    sa.column("series_id", sa.Integer), sa.column("opened_by_result_id", sa.Integer),
    sa.column("status", sa.String), sa.column("resolved_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)


# ---- the key rules (as of this revision; later code may change, this must not) ----------

def timing_mode(timing: Any, spec: dict[str, Any]) -> str:
    """What a result was timed with: BenchResult.timing_mode, re-stated here so that the
    migration keeps its meaning if that method changes later."""
    if isinstance(timing, dict):
        mode = timing.get("mode")
        if mode in TIMING_MODES:
            return str(mode)
        graphs = timing.get("cuda_graphs")
        if isinstance(graphs, dict) and graphs:
            return "graphs" if all(v is True for v in graphs.values()) else "nographs"
    policy: dict[str, Any] = spec["timing"] if isinstance(spec.get("timing"), dict) else {}
    on_cuda = spec.get("device") == "cuda"
    return "graphs" if on_cuda and policy.get("cuda_graphs", True) is True else "nographs"


class SpecError(ValueError):
    """A stored spec or key that admits no key under the rules below."""


# The spec's defaults and the key's shape at this revision.
_SPEC_DEFAULTS: dict[str, Any] = {
    "model": "resnet50", "backend": "onnxruntime", "weights": "constant", "precision": "fp32",
    "batch_size": 1, "shape_mode": "static", "device": "cpu", "image_size": 224, "width": 64,
    "num_classes": 1000}
_NOT_MEASUREMENT_OPTIONS = {"threads"}
SERIES_KEY_FIELDS = ("model", "backend", "weights", "precision", "batch_size", "shape_mode",
                     "device_class", "threads", "timing_mode", "options")
_KEY_SHAPE = "model/backend/weights/precision/bsN/shape/device/tN|tauto/graphs|nographs[/options]"


def _measurement_options(options: dict[str, Any]) -> str:
    items = sorted((str(k), v) for k, v in options.items()
                   if k not in _NOT_MEASUREMENT_OPTIONS and not str(k).startswith("_"))
    return ",".join(f"{k}={json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v}"
                    for k, v in items)


def spec_key(data: Any, device_class: str, mode: str | None = None) -> str:
    """The series key of a stored spec (BenchSpec.series_key at this revision):
    model[-wW][-iI][-cC]/backend/weights/precision/bsN/shape/device/tN|tauto/mode[/options]."""
    spec = {**_SPEC_DEFAULTS, **{k: v for k, v in dict(data or {}).items()
                                  if k in _SPEC_DEFAULTS}}
    options = (data or {}).get("options") or {}
    timing = (data or {}).get("timing") or {}
    if not isinstance(options, dict) or not isinstance(timing, dict):
        raise SpecError("options and timing must be objects")
    label = str(spec["model"])
    for field, default, tag in (("width", 64, "w"), ("image_size", 224, "i"),
                                ("num_classes", 1000, "c")):
        if spec[field] != default:
            label += f"-{tag}{spec[field]}"
    threads = options.get("threads")
    if mode is None:
        mode = ("graphs" if spec["device"] == "cuda" and timing.get("cuda_graphs", True)
                else "nographs")
    key = (f"{label}/{spec['backend']}/{spec['weights']}/{spec['precision']}"
           f"/bs{int(spec['batch_size'])}/{spec['shape_mode']}/{device_class}"
           f"/{'tauto' if threads is None else f't{int(threads)}'}/{mode}")
    segment = _measurement_options(options)
    return f"{key}/{segment}" if segment else key


def parse_series_key(key: str) -> dict[str, str | int | None]:
    """The axes of a key; raises SpecError naming the expected shape."""
    parts = key.split("/", 9)
    ok = (
        len(parts) in (9, 10)
        and parts[4].startswith("bs") and parts[4][2:].isdigit()
        and (parts[7] == "tauto" or (parts[7].startswith("t") and parts[7][1:].isdigit()))
        and parts[8] in TIMING_MODES
        and all(parts)
    )
    if not ok:
        raise SpecError(f"series_key: {key!r} is not {_KEY_SHAPE}")
    out: dict[str, str | int | None] = dict(zip(SERIES_KEY_FIELDS, parts, strict=False))
    out["batch_size"] = int(parts[4][2:])
    out["threads"] = None if parts[7] == "tauto" else int(parts[7][1:])
    out["options"] = parts[9] if len(parts) == 10 else ""
    return out


def key_device_class(key: str) -> str:
    """The device class a stored key names: 7th segment of an old or a new key."""
    try:
        return str(parse_series_key(key)["device_class"])
    except SpecError:
        parts = key.split("/")
        return parts[6] if len(parts) > 6 and parts[6] else "unknown"


def old_key(key: str) -> str:
    return "/".join(key.split("/")[:OLD_SEGMENTS])


def _chunks(values: list[int], size: int = BATCH) -> Iterable[list[int]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _now(bind: sa.engine.Connection) -> datetime:
    now = datetime.now(timezone.utc)
    return now.replace(tzinfo=None) if bind.dialect.name == "sqlite" else now


# ---- upgrade -----------------------------------------------------------------------------

def upgrade() -> None:
    with op.batch_alter_table("series") as batch:
        batch.add_column(sa.Column("project_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("threads", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("timing_mode", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("options", sa.String(length=300), nullable=True))
        # the same key may now exist once per project
        batch.drop_constraint(op.f("uq_series_key"), type_="unique")

    bind = op.get_bind()
    rekeyed = _Rekeyed(bind)
    _rekey_results(bind, rekeyed)
    _rekey_cells_without_result(bind, rekeyed)
    opened_in = (  # each regression -> the (new) series of the result that opened it
        sa.select(regressions.c.id, regressions.c.project_id, regressions.c.status,
                  results.c.series_id)
        .select_from(regressions.join(
            results, results.c.id == regressions.c.opened_by_result_id)))
    _repoint_regressions(bind, [(r.id, r.project_id, r.status, r.series_id)
                                for r in bind.execute(opened_in).all()])
    _rewrite_thresholds(bind, lambda project_id, key: sorted(
        rekeyed.derived.get((project_id, key), ())))
    bind.execute(series.delete().where(series.c.project_id.is_(None)))

    with op.batch_alter_table("series") as batch:
        batch.alter_column("project_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("timing_mode", existing_type=sa.String(length=16), nullable=False)
        batch.alter_column("options", existing_type=sa.String(length=300), nullable=False)
        batch.create_foreign_key(op.f("fk_series_project_id_projects"), "projects",
                                 ["project_id"], ["id"], ondelete="CASCADE")
        batch.create_unique_constraint(op.f("uq_series_project_id_key"),
                                       ["project_id", "key"])
        batch.create_index("ix_series_key_id", ["key", "id"], unique=False)
        batch.create_check_constraint(op.f("ck_series_timing_mode"),
                                      "timing_mode IN ('graphs', 'nographs')")


class _Rekeyed:
    """The new series rows made so far, and which new keys each old key became."""

    def __init__(self, bind: sa.engine.Connection) -> None:
        self.bind = bind
        self.series_ids: dict[tuple[int, str], int] = {}
        # (project id, old key) -> new keys of that project derived from it
        self.derived: dict[tuple[int, str], set[str]] = defaultdict(set)

    def series_id(self, project_id: int, key: str, created_at: datetime | None) -> int:
        found = self.series_ids.get((project_id, key))
        if found is None:
            axes = parse_series_key(key)
            found = self.series_ids[(project_id, key)] = int(self.bind.execute(
                series.insert().values(project_id=project_id, key=key, **axes,
                                       created_at=created_at or _now(self.bind))
                .returning(series.c.id)).scalar_one())
        return found


def _rekey_results(bind: sa.engine.Connection, rekeyed: _Rekeyed) -> None:
    last_id = 0
    while True:
        rows = bind.execute(
            sa.select(results.c.id, results.c.cell_id, runs.c.project_id, cells.c.spec,
                      series.c.key, series.c.created_at,
                      results.c.evidence["timing"].label("timing"),
                      results.c.fingerprint["device_class"].label("device_class"))
            .select_from(results.join(runs, runs.c.id == results.c.run_id)
                         .join(cells, cells.c.id == results.c.cell_id)
                         .join(series, series.c.id == results.c.series_id))
            .where(results.c.id > last_id)
            .order_by(results.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        to_series: dict[int, list[int]] = defaultdict(list)  # new series id -> result ids
        to_key: dict[str, list[int]] = defaultdict(list)  # new key -> cell ids
        for row in rows:
            spec = row.spec if isinstance(row.spec, dict) else {}
            device_class = row.device_class if isinstance(row.device_class, str) \
                and row.device_class else key_device_class(row.key)
            try:
                key = spec_key(spec, device_class, timing_mode(row.timing, spec))
            except (SpecError, TypeError, ValueError) as exc:
                raise RuntimeError(f"result {row.id}: no series key from its cell's spec "
                                   f"({exc}); fix or delete that cell, then migrate again"
                                   ) from exc
            rekeyed.derived[(row.project_id, row.key)].add(key)
            to_series[rekeyed.series_id(row.project_id, key, row.created_at)].append(row.id)
            to_key[key].append(row.cell_id)
        for series_id, ids in to_series.items():
            bind.execute(results.update().where(results.c.id.in_(ids))
                         .values(series_id=series_id))
        for key, ids in to_key.items():
            bind.execute(cells.update().where(cells.c.id.in_(ids)).values(series_key=key))
        last_id = rows[-1].id


def _rekey_cells_without_result(bind: sa.engine.Connection, rekeyed: _Rekeyed) -> None:
    """Queued, running or failed-before-a-result cells: the key their spec asks for."""
    last_id = 0
    while True:
        rows = bind.execute(
            sa.select(cells.c.id, cells.c.spec, cells.c.series_key, runs.c.project_id)
            .select_from(cells.join(runs, runs.c.id == cells.c.run_id)
                         .outerjoin(results, results.c.cell_id == cells.c.id))
            .where(cells.c.id > last_id, results.c.id.is_(None))
            .order_by(cells.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        to_key: dict[str, list[int]] = defaultdict(list)
        for row in rows:
            try:
                key = spec_key(row.spec, key_device_class(row.series_key))
            except (SpecError, TypeError, ValueError) as exc:
                raise RuntimeError(f"cell {row.id}: no series key from its spec ({exc})"
                                   ) from exc
            rekeyed.derived[(row.project_id, row.series_key)].add(key)
            to_key[key].append(row.id)
        for key, ids in to_key.items():
            bind.execute(cells.update().where(cells.c.id.in_(ids)).values(series_key=key))
        last_id = rows[-1].id


def _repoint_regressions(bind: sa.engine.Connection,
                         moves: list[tuple[int, int, str, int]]) -> None:
    """(regression id, project id, status, target series id) -> series_id = target.

    At most one regression per project and series may be active (a partial unique index):
    where several active ones meet on one target, the newest stays active and the others
    are resolved first.
    """
    active: dict[tuple[int, int], list[int]] = defaultdict(list)
    for regression_id, project_id, status, target in moves:
        if status in ACTIVE:
            active[(project_id, target)].append(regression_id)
    merged = [rid for ids in active.values() for rid in sorted(ids)[:-1]]
    now = _now(bind)
    for ids in _chunks(merged):
        bind.execute(regressions.update().where(regressions.c.id.in_(ids))
                     .values(status="resolved", resolved_at=now, updated_at=now))
    by_target: dict[int, list[int]] = defaultdict(list)
    for regression_id, _project_id, _status, target in moves:
        by_target[target].append(regression_id)
    for target, ids in by_target.items():
        for chunk in _chunks(ids):
            bind.execute(regressions.update().where(regressions.c.id.in_(chunk))
                         .values(series_id=target))


def _rewrite_thresholds(bind: sa.engine.Connection, new_keys: Any) -> None:
    """Each project's `series_thresholds`: key -> `new_keys(project_id, key)` (a key with
    none is kept as it was). An explicit entry for a new key wins over a derived one; of
    several derived values for one key, the lowest (strictest) wins."""
    for project_id, detection in bind.execute(
            sa.select(projects.c.id, projects.c.detection)).all():
        if not isinstance(detection, dict):
            continue
        thresholds = detection.get("series_thresholds")
        if not isinstance(thresholds, dict) or not thresholds:
            continue
        kept: dict[str, Any] = {}
        derived: dict[str, Any] = {}
        for key, value in thresholds.items():
            targets = new_keys(project_id, key)
            if not targets or targets == [key]:
                kept[key] = value
                continue
            for target in targets:
                derived[target] = value if target not in derived else min(derived[target], value)
        rewritten = {**derived, **kept}
        if rewritten != thresholds:
            bind.execute(projects.update().where(projects.c.id == project_id).values(
                detection={**detection, "series_thresholds": dict(sorted(rewritten.items()))}))


# ---- downgrade ---------------------------------------------------------------------------

def downgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.select(series.c.id, series.c.key).order_by(series.c.id)).all()
    survivor_of_key: dict[str, int] = {}
    survivor: dict[int, int] = {}
    for series_id, key in rows:
        survivor[series_id] = survivor_of_key.setdefault(old_key(key), series_id)

    merged: dict[int, list[int]] = defaultdict(list)  # survivor -> series merged into it
    for series_id, target in survivor.items():
        if series_id != target:
            merged[target].append(series_id)
    moves = [(r.id, r.project_id, r.status, survivor[r.series_id]) for r in bind.execute(
        sa.select(regressions.c.id, regressions.c.project_id, regressions.c.status,
                  regressions.c.series_id)).all()]
    _repoint_regressions(bind, moves)
    for target, sources in merged.items():
        for chunk in _chunks(sources):
            bind.execute(results.update().where(results.c.series_id.in_(chunk))
                         .values(series_id=target))
    for chunk in _chunks([sid for sources in merged.values() for sid in sources]):
        bind.execute(series.delete().where(series.c.id.in_(chunk)))
    for key, series_id in survivor_of_key.items():
        bind.execute(series.update().where(series.c.id == series_id).values(key=key))

    last_id = 0
    while True:
        cell_rows = bind.execute(
            sa.select(cells.c.id, cells.c.series_key).where(cells.c.id > last_id)
            .order_by(cells.c.id).limit(BATCH)).all()
        if not cell_rows:
            break
        to_key: dict[str, list[int]] = defaultdict(list)
        for cell_id, key in cell_rows:
            if old_key(key) != key:
                to_key[old_key(key)].append(cell_id)
        for key, ids in to_key.items():
            bind.execute(cells.update().where(cells.c.id.in_(ids)).values(series_key=key))
        last_id = cell_rows[-1].id

    _rewrite_thresholds(bind, lambda _project_id, key: [old_key(key)])

    with op.batch_alter_table("series") as batch:
        batch.drop_constraint(op.f("ck_series_timing_mode"), type_="check")
        batch.drop_index("ix_series_key_id")
        batch.drop_constraint(op.f("uq_series_project_id_key"), type_="unique")
        batch.drop_constraint(op.f("fk_series_project_id_projects"), type_="foreignkey")
        batch.drop_column("options")
        batch.drop_column("timing_mode")
        batch.drop_column("threads")
        batch.drop_column("project_id")
        batch.create_unique_constraint(op.f("uq_series_key"), ["key"])

"""A project's detection policy as people read and change it (the API and `speedwatch policy`).

Detection itself (app.services.detection) reads the stored policy on every judged run
through `project_policy`; this module also owns the checks that need the store, which the
DetectionPolicy model (app.detection.policy) alone cannot make: a pinned baseline needs a
run, and that run must belong to the project. Changing the policy changes what counts as a
regression from the next judged cell on; regressions already open keep the threshold and
baseline they were opened with. Flushes, never commits.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.detection.policy import DetectionPolicy
from app.errors import InvalidRequest, NotFound
from app.models import Project, Run
from app.services.common import get_or_create_project
from app.services.tokens import EVERY_PROJECT, ProjectAccess

log = logging.getLogger(__name__)


def project_policy(project: Project) -> DetectionPolicy:
    """The stored policy, or the defaults (with a log line) if it is missing or invalid."""
    if not project.detection:
        return DetectionPolicy()
    try:
        return DetectionPolicy.model_validate(project.detection)
    except ValidationError as exc:
        log.warning("project %s: invalid detection policy, using defaults: %s",
                    project.name, exc.errors()[0].get("msg"))
        return DetectionPolicy()


def get_project(session: Session, name: str, access: ProjectAccess = EVERY_PROJECT) -> Project:
    project = session.scalars(select(Project).where(Project.name == name)).first()
    if project is None or not access.allows(name):
        raise NotFound(f"project {name!r} not found")
    return project


def read_policy(session: Session, name: str,
                access: ProjectAccess = EVERY_PROJECT) -> tuple[Project, DetectionPolicy]:
    """The project's effective policy (the defaults where none is stored)."""
    project = get_project(session, name, access)
    return project, project_policy(project)


def set_policy(session: Session, name: str, policy: DetectionPolicy) -> Project:
    """Replace the project's policy (creating the project, as a first run would).

    A policy that would make every later cell an error ("no baseline") is refused here, with
    the field that is wrong, instead of being stored and discovered on the next CI run.
    """
    if policy.baseline == "pinned" and policy.pinned_run_id is None:
        raise InvalidRequest("pinned_run_id", "required when baseline is 'pinned'")
    project = get_or_create_project(session, name)
    if policy.pinned_run_id is not None:
        run = session.get(Run, policy.pinned_run_id)
        if run is None or run.project_id != project.id:
            raise InvalidRequest("pinned_run_id",
                                 f"run {policy.pinned_run_id} is not a run of project {name!r}")
    project.detection = policy.model_dump(mode="json")
    session.flush()
    return project

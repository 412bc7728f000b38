"""A project's detection policy: read it (read scope), replace it (admin scope).

Changing the baseline or a threshold changes which results fail CI, so it is an admin act,
like token management; a `ci` token, which every pipeline holds, cannot loosen the bar.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.api.deps import AdminAccess, ReadAccess, SessionDep
from app.api.presenters import error_responses
from app.detection.policy import DetectionPolicy
from app.models import Project
from app.schemas import DetectionPolicyPublic
from app.services import policy as service
from app.services.policy import project_policy

router = APIRouter(prefix="/api/v1/projects", tags=["projects"])

ERRORS = error_responses(401, 403, 422, 503)
ProjectPath = Annotated[str, Path(min_length=1, max_length=100,
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
                                  description="project name (slashes allowed)")]


def policy_public(project: Project) -> DetectionPolicyPublic:
    return DetectionPolicyPublic(project=project.name, policy=project_policy(project),
                                 stored=bool(project.detection))


@router.get("/{name:path}/detection", response_model=DetectionPolicyPublic,
            responses={**error_responses(404), **ERRORS},
            summary="A project's detection policy (the defaults if it has none)")
def get_detection(name: ProjectPath, session: SessionDep,
                  access: ReadAccess) -> DetectionPolicyPublic:
    project, _ = service.read_policy(session, name, access)
    return policy_public(project)


@router.put("/{name:path}/detection", response_model=DetectionPolicyPublic,
            responses=ERRORS, summary="Replace a project's detection policy (admin scope)")
def put_detection(name: ProjectPath, policy: DetectionPolicy, session: SessionDep,
                  access: AdminAccess) -> DetectionPolicyPublic:
    """Fields left out take their defaults (this replaces the whole policy). The project is
    created if it does not exist yet, so its policy can be set before its first run. Takes
    effect for cells judged from now on; open regressions keep their threshold. An admin
    token limited to projects sets the policy of those only (403 for another)."""
    access.check_write(name)
    project = service.set_policy(session, name, policy)
    session.commit()
    return policy_public(project)

"""The app `speedwatch serve` runs moves what it started with out of the garbage
collector's way: a full collection on a busy API process walked every module and schema
it had imported, with the GIL held, and stalled every request in flight."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app


def test_the_served_app_freezes_its_start_up_objects_and_a_test_app_does_not(
    settings: Settings,
) -> None:
    before = gc.get_freeze_count()
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() == before
        with TestClient(create_app(settings, freeze_at_start=True)) as client:
            assert client.get("/healthz").status_code == 200
            # the interpreter, the app and its imports: over a hundred thousand objects
            assert gc.get_freeze_count() > before + 50_000
    finally:
        gc.unfreeze()


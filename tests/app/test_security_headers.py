"""Every answer carries the headers a browser needs to keep the dashboard and the API safe:
no MIME sniffing, no framing, no referrer to other sites; API answers are never cached; the
dashboard's pages allow only the site's own scripts (no inline script or handler)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.api.middleware import DASHBOARD_CSP

TEMPLATES = Path(__file__).resolve().parents[2] / "app" / "dashboard" / "templates"


def test_api_answers_are_not_stored_and_not_sniffed(client: TestClient, read_token: str) -> None:
    for path in ("/api/v1/runs", "/api/v1/nope"):
        answer = client.get(path, headers={"Authorization": f"Bearer {read_token}"})
        assert answer.headers["cache-control"] == "no-store", path
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert "content-security-policy" not in answer.headers  # JSON, not a page


def test_dashboard_pages_allow_only_their_own_scripts(client: TestClient) -> None:
    page = client.get("/")
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == DASHBOARD_CSP
    assert "script-src 'self';" in DASHBOARD_CSP and "frame-ancestors 'none'" in DASHBOARD_CSP
    # Swagger UI runs an inline script of its own: its page keeps working
    assert "content-security-policy" not in client.get("/docs").headers


def test_no_template_has_an_inline_script_or_handler() -> None:
    """What the policy forbids is not written: scripts are files, data is JSON."""
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<[^>]*\son[a-z]+=\"", text), template.name
        for tag in re.findall(r"<script[^>]*>", text):
            assert 'type="application/json"' in tag or "src=" in tag, (template.name, tag)

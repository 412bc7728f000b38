"""The production set-up without Docker (docs/deployment.md, "Without Docker") followed as
written, block by block, on this machine: a role and a database created in the real
PostgreSQL by its superuser, the schema migrated as that role, tokens created,
`speedwatch serve` in production mode, the dashboard signed in to through
`POST /session/token`.

Two blocks are the reader's own and are replaced here: the first (names and secrets: here
fresh names, a free port, and the superuser connection the test suite uses) and the Redis
password, which configures a system service (here a private redis-server started with that
password). Every other block runs as the page shows it, in one bash, in that order.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from devkit.ports import free_port
from tests.conftest import _admin_connection

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"


def _blocks() -> list[str]:
    """The page's bash blocks of the section "Without Docker", in order."""
    text = DOC.read_text()
    section = text.split("## Without Docker", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.DOTALL)


def test_the_page_has_the_steps_this_test_follows() -> None:
    blocks = _blocks()
    assert len(blocks) == 7
    assert blocks[0].startswith("SW_DB=speedwatch") and "PSQL_ADMIN=" in blocks[0]
    assert "CREATE ROLE" in blocks[1] and "CREATE DATABASE" in blocks[1]
    assert "requirepass" in blocks[2]
    assert "SPEEDWATCH_ENVIRONMENT=production" in blocks[3]
    assert "speedwatch migrate" in blocks[4] and "token create" in blocks[4]
    assert "speedwatch serve" in blocks[5]
    assert "/session/token" in blocks[6]


def test_following_the_production_setup_page_signs_in_to_a_private_dashboard(
    tmp_path: Path,
) -> None:
    admin, admin_url = _admin_connection()
    name = f"sw_doc_{secrets.token_hex(4)}"
    redis_port = free_port()
    ours = {
        0: (f"SW_DB={name} SW_ROLE={name}\n"
            f"SW_DB_PASSWORD={secrets.token_hex(24)} SW_REDIS_PASSWORD={secrets.token_hex(24)}\n"
            f"SW_PG=127.0.0.1:5432 SW_REDIS=127.0.0.1:{redis_port} SW_PORT={free_port()}\n"
            f'PSQL_ADMIN="psql {admin_url}"\n'),
        2: (f'redis-server --port {redis_port} --bind 127.0.0.1 --requirepass '
            f'"$SW_REDIS_PASSWORD" --save "" --appendonly no --daemonize yes '
            f'--dir "{tmp_path}" --pidfile "{tmp_path}/redis.pid"\n'),
    }
    steps = [ours.get(i, block) for i, block in enumerate(_blocks())]
    script = "\n".join(["set -euo pipefail",
                        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", *steps])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPEEDWATCH_")}
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**clean, "PATH": f"{Path(sys.executable).parent}:{clean['PATH']}"})
        log = (tmp_path / "speedwatch-api.log")
        assert done.returncode == 0, done.stderr + (log.read_text() if log.exists() else "")
        assert done.stdout.strip().splitlines()[-1] == "signed in", done.stdout
        with psycopg.connect(admin_url.rsplit("/", 1)[0] + f"/{name}") as db:
            owner, superuser, create_db = db.execute(
                "SELECT pg_get_userbyid(d.datdba), r.rolsuper, r.rolcreatedb FROM pg_database d "
                "JOIN pg_roles r ON r.rolname = %s WHERE d.datname = %s", (name, name)).fetchone() \
                or (None, None, None)
            tables_owner = db.execute(
                "SELECT tableowner FROM pg_tables WHERE tablename = 'api_tokens'").fetchone()
            scopes = sorted(s for (s,) in db.execute(
                "SELECT scopes->>0 FROM api_tokens").fetchall())
        assert (owner, superuser, create_db, tables_owner) == (name, False, False, (name,))
        assert scopes == ["admin", "ci", "read"]
    finally:
        pid = tmp_path / "redis.pid"
        if pid.exists():
            subprocess.run(["kill", pid.read_text().strip()], check=False)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        admin.close()

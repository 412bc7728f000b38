"""Service settings: one pydantic-settings class read from `SPEEDWATCH_*` environment variables.

Every knob of the API, the store and the workers lives here (declared by concern in
app.settings_groups) so that a deployment is described
by its environment alone. Settings that are only safe on a developer's machine (an embedded
SQLite file, a placeholder or empty password, the in-process executor, anonymous reads left
at their default) are refused when `environment` is "production", so a forgotten variable
fails the start instead of shipping.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import parse_qs, urlsplit

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.settings_groups import (
    AdmissionSettings,
    EnvironmentSettings,
    QueueSettings,
    RunSettings,
    ServingSettings,
    StoreSettings,
    WebhookSettings,
    WorkerSettings,
)

# Passwords that appear in examples and compose files; a production URL must not use them.
PLACEHOLDER_PASSWORDS = {"changethis", "changeme", "password", "postgres", "speedwatch", "secret"}


class Settings(WebhookSettings, RunSettings, WorkerSettings, EnvironmentSettings,
               QueueSettings, StoreSettings, AdmissionSettings, ServingSettings, BaseSettings):
    """All settings, by concern (app.settings_groups); see docs/CONTRACTS.md "Settings" for
    the contract with the workers. (Pydantic takes the fields of the last base first: the
    groups are listed last to first so that they read, in help and errors, in the order of
    app.settings_groups.)"""

    model_config = SettingsConfigDict(env_prefix="SPEEDWATCH_", extra="ignore")

    @model_validator(mode="after")
    def _refuse_insecure_production(self) -> Settings:
        if self.environment != "production":
            return self
        problems: list[str] = []
        if self.database_url.startswith("sqlite"):
            problems.append("database_url: SQLite is the embedded default, not a production store")
        for name in ("database_url", "broker_url"):
            if name == "database_url" and self.database_url.startswith("sqlite"):
                continue
            if name == "broker_url" and self.executor != "celery":
                continue  # no broker is used
            password = _url_password(getattr(self, name))
            if password is None:
                # anyone who reaches the port could then read or rewrite the store, or
                # queue work for the workers
                problems.append(f"{name}: has no password (write it in the URL: "
                                "scheme://user:PASSWORD@host/...)")
            elif password == "":
                problems.append(f"{name}: has an empty password")
            elif password.lower() in PLACEHOLDER_PASSWORDS:
                problems.append(f"{name}: uses the placeholder password {password!r}")
        if self.executor == "local":
            problems.append("executor: 'local' runs benchmarks inside the API process")
        if "public_reads" not in self.model_fields_set:
            # The default suits a developer's machine; who may read a deployment's results
            # is a decision, so it must be written down (true: anonymous GETs; false: a
            # `read` token). Writes always need a token: there is no setting to open them.
            problems.append("public_reads: set SPEEDWATCH_PUBLIC_READS to true or false")
        if problems:
            raise ValueError("refusing insecure production settings: " + "; ".join(problems))
        return self


    def admission_limits(self) -> tuple[int, int, int]:
        """(requests in flight, of which one identity's, of which the anonymous'), the
        defaults from the pool's size."""
        total = self.max_requests_in_flight or max(2, self.db_pool_size * 2)
        return (total, min(total, self.max_requests_per_client or max(1, total // 2)),
                min(total, self.max_anonymous_requests_in_flight or max(1, total // 5)))


def _url_password(url: str) -> str | None:
    """The URL's password (its user info, else a `password=` query parameter as libpq
    takes it), None when it has none."""
    match = re.match(r"^[a-z0-9+]+://[^:/@]*:([^@/]*)@", url)
    if match:
        return match.group(1)
    query = parse_qs(urlsplit(url).query, keep_blank_values=True).get("password")
    return query[0] if query else None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings; tests call `get_settings.cache_clear()` after changing env."""
    return Settings()

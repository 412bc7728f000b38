"""Scratch PostgreSQL databases for measurements that must not touch anyone's store."""

from __future__ import annotations

import secrets

import psycopg


def create_database(admin_url: str, prefix: str) -> tuple[str, str]:
    """A new empty database on the admin URL's server; returns (name, its URL)."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name, f"{admin_url.rsplit('/', 1)[0]}/{name}"


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

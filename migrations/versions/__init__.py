"""Revision files (Alembic skips this __init__; it exists so the folder ships as a package)."""

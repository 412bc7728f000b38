"""Alembic migrations for the Speedwatch store; `speedwatch migrate` finds them by import.

Run them with `speedwatch migrate` or `app.db.upgrade(url)`; there is no alembic.ini: the
Alembic Config is built in code (app/db.py) so that the installed package works from any CWD.
"""

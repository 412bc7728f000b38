"""Speedwatch measurement core: models, backends, paired timing, statistics.

This package must never import the service (FastAPI, SQLAlchemy, Celery): workers run it
inside environments that hold only torch and the backend under test.
"""

__version__ = "0.1.0"

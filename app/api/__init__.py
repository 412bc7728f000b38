"""The HTTP edge: dependencies, middleware and routes of the REST API (/api/v1)."""

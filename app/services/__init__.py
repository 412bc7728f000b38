"""Service layer: the operations on the store, shared by the API, the workers and the CLI.

Functions take a Session and never commit: the caller owns the transaction (the API's
request, a worker's `session_scope`), so several operations can form one unit of work.
"""

"""The `speedwatch` command line: one Typer app (cli.main) and one module per command group.

It sits on top of everything (it starts the API, the workers and local measurements), so
nothing else imports it. Command modules import their heavy dependencies (torch,
SQLAlchemy, Celery) inside the command functions, so `speedwatch --help` stays fast and
`bench` works without the service.
"""

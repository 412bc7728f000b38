"""Helpers shared by the tests, the scripts and the experiments: seeded stores, result
factories, a browser, free ports, scratch databases, a stand-in package index, the CI
templates' steps. Not part of the installed product (pyproject's packages leave it out),
and it imports no test: scripts and experiments reach it, never `tests`."""

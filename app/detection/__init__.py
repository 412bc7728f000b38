"""Regression detection: pure statistics on plain numbers and result documents.

- changepoints: level shifts in a series' history (`speedwatch detect` uses it).
- verdict: one new cell against its baseline, from raw samples; the run's verdict.
- evidence: what changed between two results, in one readable sentence.
- corpus: the seeded labelled series the detector is benchmarked on.
- policy: what a project asks of detection (baseline, thresholds, confirmation), a model.

No database, web or task-queue imports here: the service calls these functions.
"""

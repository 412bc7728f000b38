"""The words a measurement's record uses for how it ended, in one place: the decision rule
(benchmarks.stats), the adaptive loop (benchmarks.adaptive, benchmarks.isolation) and the
result document's schema (benchmarks.result_schema) take them from here, so a word the
harness can write is a word the schema takes."""

from __future__ import annotations

from typing import Literal

# How a comparison with its reference came out (stats.classify_ratio, stats.decide): a
# real change past the threshold either way, "pass" (a drop of the threshold's size ruled
# out), "precise" (no reference, the interval narrow enough), or "undecided" (the verdict
# calls a cell left undecided "inconclusive").
Outcome = Literal["pass", "regression", "improvement", "precise", "undecided"]

# Why an adaptive measurement stopped adding processes.
StoppedBy = Literal["decided", "max_processes", "budget", "fixed_processes", "same_software"]

# How a cell was compared: against the stored baseline ("adaptive"), not at all (the
# baseline's very software: "same_software"), or with the baseline's environment measured
# in the same session ("interleaved": evidence.comparison).
AdaptiveMode = Literal["adaptive", "same_software", "interleaved"]

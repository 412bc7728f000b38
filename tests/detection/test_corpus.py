"""The labelled benchmark corpus: reproducible, and its recorded true noise is the noise."""

from __future__ import annotations

import numpy as np

from app.detection.corpus import generate_corpus


def test_a_seed_always_gives_the_same_corpus() -> None:
    assert generate_corpus(7, 40) == generate_corpus(7, 40)


def test_each_points_recorded_true_noise_is_what_its_value_scatters_by() -> None:
    """`point_sd` (no detector sees it; scripts/detection_ceiling.py's oracle does) must be
    the scatter of the values around their level: in unchanged gaussian series the values
    divided by it have unit variance, whether the intervals are tight or wide."""
    for kind in ("gpu", "cpu"):
        z: list[float] = []
        for s in generate_corpus(3, 1500):
            if s.kind != kind or s.shape != "gaussian" or s.changes or len(s.values) < 10:
                continue
            assert s.point_sd is not None and len(s.point_sd) == len(s.values)
            x = np.log(np.asarray(s.values))
            z.extend((x - x.mean()) / np.asarray(s.point_sd))
        assert len(z) > 2000
        assert 0.9 < float(np.var(z)) < 1.1, kind

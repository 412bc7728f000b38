"""`speedwatch detect`: the JSON contract, and exit code 2 with one line on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import cli

STEP = [2.0, 2.01, 1.99, 2.0, 2.02, 1.98, 2.0, 2.01, 1.99, 2.0, 2.01, 1.99, 2.0, 2.02,
        1.8, 1.81, 1.79, 1.8, 1.82, 1.78, 1.8, 1.81, 1.79, 1.8, 1.81, 1.79, 1.8, 1.82]


def run(args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, args, input=stdin)
    return res.exit_code, res.stdout, res.stderr


def test_output_has_exactly_the_documented_keys(tmp_path: Path) -> None:
    path = tmp_path / "series.json"
    path.write_text(json.dumps({"series": [
        {"id": "speedup", "values": STEP, "higher_is_better": True},
        {"id": "latency", "values": STEP, "higher_is_better": False},
        {"id": "flat", "values": [1.0] * 20, "higher_is_better": True},
    ]}))
    code, out, _ = run(["detect", "--input", str(path)])
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["series"]
    assert [s["id"] for s in doc["series"]] == ["speedup", "latency", "flat"]
    for s in doc["series"]:
        assert list(s) == ["id", "change_points"]
    [cp] = doc["series"][0]["change_points"]
    assert list(cp) == ["index", "direction", "before", "after", "relative_change", "p_value"]
    assert cp["index"] == 14 and cp["direction"] == "regression"
    assert isinstance(cp["p_value"], float)
    assert doc["series"][1]["change_points"][0]["direction"] == "improvement"
    assert doc["series"][2]["change_points"] == []


def test_stdin_is_read_with_dash() -> None:
    code, out, _ = run(["detect", "--input", "-"],
                       json.dumps({"series": [{"id": "a", "values": STEP,
                                               "higher_is_better": True}]}))
    assert code == 0
    assert json.loads(out)["series"][0]["change_points"][0]["index"] == 14


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        ("not json", "input is not JSON"),
        ('{"series": {}}', '"series" must be a list'),
        ('{"series": [{"id": "a", "values": [1]}]}', "series[0] lacks higher_is_better"),
        ('{"series": [{"id": "a", "values": [1, "x"], "higher_is_better": true}]}',
         "series[0].values[1] is not a number"),
        ('{"series": [{"id": "a", "values": [1, NaN], "higher_is_better": true}]}',
         "NaN and infinity are refused"),
        ('{"series": [{"id": "a", "values": [], "higher_is_better": 1}]}',
         "higher_is_better must be true or false"),
        ('{"series": [{"id": "a", "values": [], "higher_is_better": true, "x": 1}]}',
         "unknown keys: x"),
        ('{"series": [{"id": "a", "values": [], "higher_is_better": true},'
         ' {"id": "a", "values": [], "higher_is_better": true}]}', "appears twice"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(stdin: str, says: str) -> None:
    code, out, err = run(["detect", "--input", "-"], stdin)
    assert code == 2
    assert out == ""
    assert says in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    code, _, err = run(["detect", "--input", str(tmp_path / "nope.json")])
    assert code == 2
    assert err.strip().endswith("no such file")


def _series(values: list[float], half: float | None, sid: str = "s") -> dict[str, object]:
    item: dict[str, object] = {"id": sid, "values": values, "higher_is_better": True}
    if half is not None:
        item["ci_low"] = [v * (1 - half) for v in values]
        item["ci_high"] = [v * (1 + half) for v in values]
    return item


# sixteen points that wiggle by 1% and drop 3% after the eighth
WIDE_STEP = [2.016, 1.988, 2.004, 1.98, 2.008, 2.02, 1.996, 1.984, 1.9206, 1.9478, 1.9594,
             1.9361, 1.9245, 1.9516, 1.94, 1.9555]


def test_intervals_are_read_and_the_output_keys_do_not_change() -> None:
    """Points that each claim +-5% cannot show a 3% step among ten; without intervals, or
    measured to +-0.1%, they do. The change point's keys are the documented six."""
    doc = {"series": [_series(WIDE_STEP, None, "alone"), _series(WIDE_STEP, 0.05, "wide"),
                      _series(WIDE_STEP, 0.001, "tight")]}
    code, out, _ = run(["detect", "--input", "-"], json.dumps(doc))
    assert code == 0
    found = {s["id"]: s["change_points"] for s in json.loads(out)["series"]}
    assert [c["index"] for c in found["alone"]] == [8]
    assert found["wide"] == []
    [tight] = found["tight"]
    assert tight["index"] == 8
    assert list(tight) == ["index", "direction", "before", "after", "relative_change",
                           "p_value"]


def test_explain_adds_the_changes_interval_and_test() -> None:
    doc = {"series": [_series(WIDE_STEP, 0.001), _series(WIDE_STEP, None, "alone")]}
    code, out, _ = run(["detect", "--input", "-", "--explain"], json.dumps(doc))
    assert code == 0
    tight, alone = (s["change_points"][0] for s in json.loads(out)["series"])
    assert tight["relative_change_ci_low"] < tight["relative_change"] < (
        tight["relative_change_ci_high"])
    assert "interval" in tight["test"] and "interval" not in alone["test"]


def test_a_null_interval_is_a_point_without_one() -> None:
    item = _series(STEP, 0.002)
    item["ci_low"][3] = item["ci_high"][3] = None  # type: ignore[index]
    code, out, _ = run(["detect", "--input", "-"], json.dumps({"series": [item]}))
    assert code == 0
    assert [c["index"] for c in json.loads(out)["series"][0]["change_points"]] == [14]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"ci_high": None}, "series[0] has ci_low but not ci_high"),
        ({"ci_low": [1.0]}, "series[0].ci_low has 1 entries, values has 3"),
        ({"ci_low": [1.0, "x", 1.0]}, "series[0].ci_low[1] is not a number"),
        ({"ci_low": [0.9, 0.9, 1.5]}, "values[2] 1.0 is outside its interval"),
        ({"ci_low": [0.9, None, 0.9]}, "point 1 has one interval bound null"),
    ],
)
def test_bad_intervals_exit_2_naming_the_field(change: dict[str, object], says: str) -> None:
    item: dict[str, object] = {"id": "a", "values": [1.0, 1.0, 1.0], "higher_is_better": True,
                               "ci_low": [0.9, 0.9, 0.9], "ci_high": [1.1, 1.1, 1.1]}
    for key, value in change.items():
        if value is None:
            del item[key]
        else:
            item[key] = value
    code, out, err = run(["detect", "--input", "-"], json.dumps({"series": [item]}))
    assert code == 2 and out == ""
    assert says in err and err.count("\n") == 1

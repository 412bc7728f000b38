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

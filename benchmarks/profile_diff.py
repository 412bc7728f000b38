"""What got slower: two profiles of one side (benchmarks.profile) matched and diffed.

A row is matched by its name where both profiles hold that name (ONNX Runtime's nodes of
one graph, eager's operators, a library kernel both builds chose); the rest by group: a new
build renames its kernels (Triton numbers them; a library picks another tile), and a kernel
family or an operator type is what stays comparable. Each row says whether it appeared,
vanished, got slower or faster, by how many microseconds per inference, and which share of
the whole change that is; `explained` is the share of the change the listed rows account
for.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

MAX_ROWS = 25

class ProfileDiffError(ValueError):
    """Two profiles that cannot be compared (different sources or kinds of rows)."""


def _rows(profile: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    return [(str(e.get("name")), str(e.get("group") or e.get("name")),
             float(e.get("calls") or 0.0), float(e.get("us") or 0.0))
            for e in profile.get("entries") or []]


def _matched(base: dict[str, Any], head: dict[str, Any]
             ) -> tuple[dict[str, tuple[float, float, float, float]], str]:
    """label -> (base calls, base us, head calls, head us). A row present under one name in
    both profiles is matched by that name; the rest by group (a kernel family, an operator
    type), labelled by its one name where the group holds one, else by the group."""
    b, h = _rows(base), _rows(head)
    shared = {n for n, *_ in b} & {n for n, *_ in h}
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    leftover: dict[str, set[str]] = defaultdict(set)
    for offset, rows in ((0, b), (2, h)):
        for name, group, calls, us in rows:
            if name in shared:
                label = name
            else:
                label = "\0" + group
                leftover[group].add(name)
            out[label][offset] += calls
            out[label][offset + 1] += us
    how = {"name"} if shared else set()
    result: dict[str, tuple[float, float, float, float]] = {}
    for label, (bc, bu, hc, hu) in out.items():
        if label.startswith("\0"):
            group = label[1:]
            names = leftover[group]
            label = next(iter(names)) if len(names) == 1 else group
            how.add("name" if len(names) == 1 else "group")
        key = label
        while key in result:  # a group named like a matched row
            key += " (group)"
        result[key] = (bc, bu, hc, hu)
    matched_by = " and ".join(sorted(how)) or "name"
    return result, matched_by


def diff(base: dict[str, Any], head: dict[str, Any], *,
         max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """The rows of `head` against `base` (both one side's profile, per inference)."""
    if (base.get("source"), base.get("what")) != (head.get("source"), head.get("what")):
        raise ProfileDiffError(
            f"the profiles are of different kinds ({base.get('source')} {base.get('what')} "
            f"against {head.get('source')} {head.get('what')}): they cannot be matched")
    matched, matched_by = _matched(base, head)
    total_base = sum(v[1] for v in matched.values())
    total_head = sum(v[3] for v in matched.values())
    change = total_head - total_base
    rows: list[dict[str, Any]] = []
    for name, (bc, bu, hc, hu) in matched.items():
        delta = hu - bu
        if bu == 0 and hu > 0:
            kind = "appeared"
        elif hu == 0 and bu > 0:
            kind = "vanished"
        elif delta > 0:
            kind = "slower"
        elif delta < 0:
            kind = "faster"
        else:
            continue
        rows.append({"name": name, "change": kind, "base_us": round(bu, 3),
                     "head_us": round(hu, 3), "delta_us": round(delta, 3),
                     "base_calls": round(bc, 3), "head_calls": round(hc, 3),
                     "share": round(delta / change, 4) if change else None})
    # the rows that moved most either way (what appeared and what it replaced), largest
    # first, so that the listed rows add up to the change, not past it
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["name"]))
    shown = rows[:max_rows]
    explained = (sum(r["delta_us"] for r in shown) / change) if change else None
    return {
        "matched_by": matched_by, "source": head.get("source"), "what": head.get("what"),
        "base_total_us": round(total_base, 3), "head_total_us": round(total_head, 3),
        "change_us": round(change, 3),
        "change": round(change / total_base, 4) if total_base else None,
        "explained": round(explained, 4) if explained is not None else None,
        "rows": shown, "rows_left_out": len(rows) - len(shown),
    }


def largest_contributor(d: dict[str, Any]) -> str | None:
    """One clause for an evidence sentence: the row that moved the total most the way the
    total moved."""
    change = d.get("change_us") or 0.0
    rows = [r for r in d.get("rows") or [] if r["delta_us"] * change > 0]
    if not rows:
        return None
    top = rows[0]
    share = top.get("share")
    # more than the whole: other rows moved back ("249% of the change" read as an error)
    clause = ("" if share is None else f", {share:.0%} of the change" if share <= 1 else
              f", more than the net {change:+.1f} us: other rows "
              f"{change - top['delta_us']:+.1f} us")
    what = {"appeared": "new", "vanished": "gone", "slower": "slower",
            "faster": "faster"}[top["change"]]
    return (f"{top['name']} {what} ({top['delta_us']:+.1f} us per inference{clause}; "
            f"profile {d['base_total_us']:.0f} -> {d['head_total_us']:.0f} us)")


SIDES = ("candidate", "baseline")  # the optimized side first: it is what usually moved


def diff_sides(before: dict[str, Any], after: dict[str, Any]
               ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each side's diff of two results' profiles (evidence.profile), and why a side has
    none."""
    diffs: dict[str, dict[str, Any]] = {}
    unavailable: dict[str, str] = {}
    for side in SIDES:
        b, a = before.get(side), after.get(side)
        if not isinstance(b, dict) or not isinstance(a, dict):
            unavailable[side] = "not profiled in both results"
            continue
        try:
            diffs[side] = diff(b, a)
        except (ProfileDiffError, TypeError, ValueError, KeyError) as exc:
            unavailable[side] = str(exc)
    return diffs, unavailable


def largest_change(diffs: dict[str, dict[str, Any]]) -> tuple[str, str] | None:
    """(side, clause) for the row that moved the speedup down most. A speedup drops when
    the candidate gets slower or eager gets faster: the side that moved that way most,
    relative to its own total, is told first."""
    scored = sorted(((1.0 if side == "candidate" else -1.0) * (d.get("change") or 0.0), side)
                    for side, d in diffs.items())
    for _, side in reversed(scored):
        clause = largest_contributor(diffs[side])
        if clause is not None:
            return side, clause
    return None

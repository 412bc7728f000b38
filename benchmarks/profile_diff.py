"""What got slower: two profiles of one side (benchmarks.profile) matched and diffed.

Rows are matched by name where both profiles share names (ONNX Runtime's nodes of one
graph, eager's operators), else by group: a new build renames its kernels (Triton numbers
them; a library picks another tile), and a kernel family or an operator type is what stays
comparable. Each row says whether it appeared, vanished, got slower or faster, by how many
microseconds per inference, and which share of the whole change that is; `explained` is the
share of the change the listed rows account for.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from benchmarks.profile import OTHER

MIN_SHARED_NAMES = 0.5  # match by name when at least half of either side's time shares names
MAX_ROWS = 25

Key = Literal["name", "group"]


class ProfileDiffError(ValueError):
    """Two profiles that cannot be compared (different sources or kinds of rows)."""


def _by(profile: dict[str, Any], key: Key) -> dict[str, tuple[float, float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in profile.get("entries") or []:
        cell = out[str(e.get(key) or e.get("name"))]
        cell[0] += float(e.get("calls") or 0.0)
        cell[1] += float(e.get("us") or 0.0)
    return {k: (c, u) for k, (c, u) in out.items()}


def matching_key(base: dict[str, Any], head: dict[str, Any]) -> Key:
    """"name" when the profiles share most of their time under common names, else "group"."""
    b, h = _by(base, "name"), _by(head, "name")
    shared = set(b) & set(h) - {OTHER}

    def covered(rows: dict[str, tuple[float, float]]) -> float:
        total = sum(u for _, u in rows.values()) or 1.0
        return sum(rows[k][1] for k in shared) / total

    return "name" if min(covered(b), covered(h)) >= MIN_SHARED_NAMES else "group"


def diff(base: dict[str, Any], head: dict[str, Any], *, key: Key | None = None,
         max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """The rows of `head` against `base` (both one side's profile, per inference)."""
    if (base.get("source"), base.get("what")) != (head.get("source"), head.get("what")):
        raise ProfileDiffError(
            f"the profiles are of different kinds ({base.get('source')} {base.get('what')} "
            f"against {head.get('source')} {head.get('what')}): they cannot be matched")
    key = key or matching_key(base, head)
    b, h = _by(base, key), _by(head, key)
    total_base = sum(u for _, u in b.values())
    total_head = sum(u for _, u in h.values())
    change = total_head - total_base
    rows: list[dict[str, Any]] = []
    for name in set(b) | set(h):
        (bc, bu), (hc, hu) = b.get(name, (0.0, 0.0)), h.get(name, (0.0, 0.0))
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
    # the rows that moved the total the way it moved, largest first, then the others
    sign = 1.0 if change >= 0 else -1.0
    rows.sort(key=lambda r: (-sign * r["delta_us"], r["name"]))
    shown = rows[:max_rows]
    explained = (sum(r["delta_us"] for r in shown) / change) if change else None
    return {
        "matched_by": key, "source": head.get("source"), "what": head.get("what"),
        "base_total_us": round(total_base, 3), "head_total_us": round(total_head, 3),
        "change_us": round(change, 3),
        "change": round(change / total_base, 4) if total_base else None,
        "explained": round(explained, 4) if explained is not None else None,
        "rows": shown, "rows_left_out": len(rows) - len(shown),
    }


def largest_contributor(d: dict[str, Any]) -> str | None:
    """One clause for an evidence sentence: the row that moved the total most."""
    rows = d.get("rows") or []
    if not rows or not d.get("change_us"):
        return None
    top = rows[0]
    share = f", {top['share']:.0%} of the change" if top.get("share") is not None else ""
    what = {"appeared": "new", "vanished": "gone", "slower": "slower",
            "faster": "faster"}[top["change"]]
    return (f"{top['name']} {what} ({top['delta_us']:+.1f} us per inference{share}; "
            f"profile {d['base_total_us']:.0f} -> {d['head_total_us']:.0f} us)")

"""A deliberately simple, loop-based reference of nesting and attribution.

The engine (nsysmap.intervals.nesting, nsysmap.attribution.attribute) uses sorts, cumulative sums
and as-of joins; this module uses a stack and parent walks, one interval at a
time. Tests compare the two on random and real inputs. It follows the
documented rules only: half-open intervals, longer-first and lower-id-first
ties, crossing intervals clipped to their parent's end.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import polars as pl

from nsysmap.attribution.rules import RULES
from nsysmap.core.range_names import parse_range_name


@dataclass
class Iv:
    id: int
    group: tuple
    start: int
    end: int
    parent: int | None = None
    depth: int = 0


def _key(iv: Iv) -> tuple[int, int, int]:
    return (iv.start, -iv.end, iv.id)


def contains(p: Iv, x: Iv) -> bool:
    """Does `p` enclose `x` under the engine's ordering rules?"""
    if _key(p) >= _key(x) or p.start > x.start or x.end > p.end:
        return False
    zero_at_end = x.start == x.end == p.end and p.start < p.end
    return not zero_at_end


def _groups(ivs: list[Iv]) -> list[list[Iv]]:
    """Fresh copies of the intervals, per group, in nesting order."""
    groups: dict[tuple, list[Iv]] = {}
    for iv in ivs:
        groups.setdefault(iv.group, []).append(Iv(iv.id, iv.group, iv.start, iv.end))
    return [sorted(members, key=_key) for members in groups.values()]


def nest(ivs: list[Iv]) -> dict[int, Iv]:
    """Parent and depth of properly nested intervals, by a stack per group."""
    out: dict[int, Iv] = {}
    for members in _groups(ivs):
        stack: list[Iv] = []
        for iv in members:
            while stack and not contains(stack[-1], iv):
                stack.pop()
            iv.parent = stack[-1].id if stack else None
            iv.depth = len(stack) + 1
            stack.append(iv)
            out[iv.id] = iv
    return out


def _open_at_start_of(top: Iv, x: Iv) -> bool:
    """Is `top` still open when `x` starts (x comes after top in key order)?"""
    return top.end > x.start or top.start == top.end == x.start


def nest_repaired(ivs: list[Iv], prio: dict[int, int] | None = None) -> dict[int, Iv]:
    """Nest intervals that may cross: one pass with a stack of open intervals.

    The innermost interval still open at an interval's start is its parent;
    if it outlives that parent it is clipped to the parent's end, unless it
    has the higher priority: then the parent is cut to end where it starts.
    """
    rank = prio or {}
    out: dict[int, Iv] = {}
    for members in _groups(ivs):
        stack: list[Iv] = []
        for iv in members:
            while True:
                while stack and not _open_at_start_of(stack[-1], iv):
                    stack.pop()
                if stack and iv.end > stack[-1].end:
                    if rank.get(iv.id, 0) > rank.get(stack[-1].id, 0):
                        stack.pop().end = iv.start
                        continue
                    iv.end = stack[-1].end
                break
            stack.append(iv)
            out[iv.id] = iv
    # Re-nest the clipped intervals: clipping can turn a longer interval into
    # an equal one, whose order then follows the tie rule.
    return nest(list(out.values()))


class Innermost:
    """Innermost interval at time t per group, by bisect and a parent walk."""

    def __init__(self, nested: dict[int, Iv]) -> None:
        self.nested = nested
        self.by_group: dict[tuple, tuple[list[tuple], list[Iv]]] = {}
        for iv in sorted(nested.values(), key=_key):
            keys, ivs = self.by_group.setdefault(iv.group, ([], []))
            keys.append(_key(iv))
            ivs.append(iv)

    def at(self, group: tuple, t: int) -> int | None:
        if group not in self.by_group:
            return None
        keys, ivs = self.by_group[group]
        i = bisect.bisect_right(keys, (t, float("inf"), float("inf"))) - 1
        node = ivs[i] if i >= 0 else None
        while node is not None and not (node.start <= t < node.end):
            node = self.nested[node.parent] if node.parent is not None else None
        return node.id if node else None


def _foreign_labels(name: str) -> dict:
    """Step and phase from the rule table's data, matched with Python's `re`."""
    out: dict = {}
    for rule in RULES:
        key = "warmup" if rule.phase == "warmup" else rule.kind
        m = re.search(rule.regex, name)
        if m is None or key in out:
            continue
        out[key] = int(m.group(1)) if key == "step" else (rule.phase if key == "phase" else True)
    return out


def _own_labels(name: str) -> dict:
    parsed = parse_range_name(name)
    if parsed is None:
        return _foreign_labels(name)
    if parsed.kind == "step":
        return {"step": parsed.step}
    if parsed.kind == "phase":
        return {"phase": parsed.phase}
    return {"module": parsed.module_path, "direction": parsed.direction}


_SEQ = re.compile(r"(?:^|, )(?:stashed )?seq = (\d+)")
_NODE_NAME = re.compile(r"\w+Backward\d*\b")


def _seq_node(name: str | None) -> tuple[int, bool] | None:
    """(sequence number, stashed) of a PyTorch operator range name, else None."""
    match = _SEQ.search(name or "")
    if not match:
        return None
    node = _NODE_NAME.match(name) is not None  # `AddmmBackward0, seq = 7`: node 7's own range
    return int(match.group(1)), "stashed seq = " in name or node


def _forward_modules(
    rows: list[dict], labels: dict, modules: Innermost
) -> dict[tuple, list[tuple[int, str | None]]]:
    """(pid, seq) -> (start, module or None) of each forward op with that number, in
    start order: a node's module is that of the latest one that started before it."""
    found: dict[tuple, list[tuple[int, str | None]]] = {}
    for r in sorted(rows, key=lambda r: (r["start_ns"], r["range_id"])):
        node = _seq_node(r["name"])
        if node is None or node[1]:
            continue
        module = modules.at((r["pid"], r["tid"]), r["start_ns"])
        named = labels[module]["module"] if module is not None else None
        found.setdefault((r["pid"], node[0]), []).append((r["start_ns"], named))
    return found


def _made_by(ops: list[tuple[int, str | None]], start: int) -> str | None:
    """The module of the latest of `ops` (start, module) at or before `start`."""
    before = [module for at, module in ops if at <= start]
    return before[-1] if before else None


def reference_attribution(
    gpu_ops: pl.DataFrame, api_calls: pl.DataFrame, ranges: pl.DataFrame
) -> dict[int, dict]:
    """op_id -> {attribution, range_id, step, phase, warmup, module} for nsysmap-style ranges.

    A backward operator range (`stashed seq = N`) outside every module range
    takes the module of the forward operator with `seq = N` in its process;
    anything inside a warm-up range has `warmup` true (its step and phase are those of
    the ranges around it). A step, phase or warm-up unknown on the launching thread
    comes from the process's other threads: of each thread's innermost such range
    open at launch, the one that started last (then ended first, then by name, thread).
    """
    launches: dict[tuple, dict] = {}
    for row in api_calls.sort("start_ns", "tid").iter_rows(named=True):
        launches.setdefault((row["pid"], row["correlation_id"]), row)
    rows = list(ranges.iter_rows(named=True))
    names = {r["range_id"]: r["name"] for r in rows}
    depths = {r["range_id"]: r["depth"] for r in rows}
    starts = {r["range_id"]: r["start_ns"] for r in rows}
    labels = {rid: _own_labels(n) for rid, n in names.items()}

    def finder(keep: callable, by_thread: bool) -> Innermost:
        ivs = [
            Iv(
                r["range_id"],
                (r["pid"], r["tid"]) if by_thread else (r["pid"],),
                r["start_ns"],
                r["end_ns"],
            )
            for r in rows
            if keep(r["range_id"])
        ]
        return Innermost(nest_repaired(ivs))

    any_range = finder(lambda rid: True, True)
    fam = {k: finder(lambda rid, k=k: k in labels[rid], True) for k in ("step", "phase", "module")}
    nodes = finder(lambda rid: _seq_node(names[rid]) is not None, True)
    forward_modules = _forward_modules(rows, labels, fam["module"])
    warm = finder(lambda rid: labels[rid].get("warmup", False), True)
    threads = sorted({(r["pid"], r["tid"]) for r in rows})
    order = {r["range_id"]: (-r["start_ns"], r["end_ns"], r["name"], r["tid"]) for r in rows}

    def latest(family: Innermost, pid: int, t: int) -> int | None:
        """Of the ranges of `pid` open at `t`, one per thread, the one that started last."""
        found = [family.at(thread, t) for thread in threads if thread[0] == pid]
        return min((rid for rid in found if rid is not None), key=order.get, default=None)

    out = {}
    for op in gpu_ops.iter_rows(named=True):
        launch = launches.get((op["pid"], op["correlation_id"]))
        res = {
            "attribution": "no_launch",
            "range_id": None,
            "step": None,
            "phase": None,
            "warmup": False,
            "module": None,
        }
        if launch is not None:
            thread, t = (launch["pid"], launch["tid"]), launch["start_ns"]
            res["range_id"] = any_range.at(thread, t)
            projected = False
            found: dict[str, int | None] = {}
            for k in ("step", "phase", "module"):
                rid = fam[k].at(thread, t)
                if rid is None and k in ("step", "phase"):
                    rid = latest(fam[k], launch["pid"], t)
                    projected = projected or rid is not None
                res[k] = labels[rid][k] if rid is not None else None
                found[k] = rid
            warm_rid = warm.at(thread, t)
            if warm_rid is None:
                warm_rid = latest(warm, launch["pid"], t)
                projected = projected or warm_rid is not None
            res["warmup"] = warm_rid is not None
            own_range = res["range_id"] is not None
            if not own_range and projected:  # credited: the innermost range that gave step or phase
                given = [found["phase"], warm_rid, found["step"]]
                given = [rid for rid in given if rid is not None]
                deepest = max(depths[rid] for rid in given)
                res["range_id"] = next(rid for rid in given if depths[rid] == deepest)
            node_id = nodes.at(thread, t) if res["module"] is None else None
            node = _seq_node(names[node_id]) if node_id is not None else None
            if node is not None and node[1]:
                made = forward_modules.get((launch["pid"], node[0]), [])
                res["module"] = _made_by(made, starts[node_id])
            res["attribution"] = (
                "range" if own_range else "other_thread" if projected else "no_range"
            )
        out[op["op_id"]] = res
    return out


def reference_overlap(ops: pl.DataFrame) -> dict[tuple, tuple[int, int]]:
    """(device, step) -> (communication ns, ns of it covered by compute on other streams).

    Plain Python: for each communication kernel, the compute intervals (other
    kernels and graph replays) of the same process and device on other streams that meet it,
    clipped to it, merged, and measured.
    """
    rows = list(ops.iter_rows(named=True))
    comm = [r for r in rows if r["kind"] == "kernel" and r["category"] == "communication"]
    compute = [
        r for r in rows if r["kind"] in ("kernel", "graph") and r["category"] != "communication"
    ]
    out: dict[tuple, tuple[int, int]] = {}
    for c in comm:
        clipped = sorted(
            (max(x["start_ns"], c["start_ns"]), min(x["end_ns"], c["end_ns"]))
            for x in compute
            if (x["pid"], x["device_id"]) == (c["pid"], c["device_id"])
            and x["stream_id"] != c["stream_id"]
        )
        covered, reach = 0, c["start_ns"]
        for start, end in clipped:
            if end > max(start, reach):
                covered += end - max(start, reach)
                reach = end
        key = (c["device_id"], c["step"])
        total, hidden = out.get(key, (0, 0))
        out[key] = (total + c["dur_ns"], hidden + covered)
    return out


def range_given(row: dict) -> dict:
    """An OPS row's step and phase as its ranges give them (null where its records
    gave them: the reference reads ranges only; tests/test_records.py covers records)."""
    return {k: row[k] if row[f"{k}_source"] == "range" else None for k in ("step", "phase")}

"""Summarise torch-profiler traces of engine steps (``bench/e2e.py --profile``).

For each trace (``*.pt.trace.json[.gz]`` under the given folders): the steps (from the
model runner's ``execute_model``-level annotations), the GPU's busy time (the union of
kernel and copy intervals) against the span the steps cover, the largest idle gaps, the
top kernels, the top host-side ops and annotations, and, in traces with Python calls
(``--profile-stack``), the Python functions by self time. A step whose GPU is busy for much
less than the step lasts is host-bound: the table then says where the host time goes.

    python -m granikv_engine.bench.trace_summary OUT/profile [--top 25]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# One per engine step: vLLM 0.26's per-step annotation (``execute_context_..._generation_
# ...``, both model runners), then older names.
STEP_MARKERS = ("execute_context", "gpu_model_runner: preprocess", "execute_model",
                "ModelRunner.execute_model")


def load(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def _is(event: dict[str, Any], marker: str | None) -> bool:
    """A step marker: a host annotation whose name starts with ``marker``."""
    return (marker is not None and event.get("cat") == "user_annotation"
            and event["name"].startswith(marker))


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals merged, in order."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def union_us(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(e - s for s, e in _merged(intervals))


def gaps(intervals: Iterable[tuple[float, float]]) -> list[float]:
    """Idle stretches between merged busy intervals, in us."""
    m = _merged(intervals)
    return [b[0] - a[1] for a, b in zip(m, m[1:])]


def summarise(events: list[dict[str, Any]], top: int = 25) -> dict[str, Any]:
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    iv = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu]
    marker = next((m for m in STEP_MARKERS if any(_is(e, m) for e in events)), None)
    steps = sorted(float(e["ts"]) for e in events if _is(e, marker)) if marker else []
    if len(steps) >= 2:  # whole steps only: first marker to last marker
        lo, hi = steps[0], steps[-1]
        n_steps = len(steps) - 1
    elif iv:
        lo, hi = min(s for s, _ in iv), max(e for _, e in iv)
        n_steps = max(1, len(steps))
    else:
        return {"steps": 0}
    inside = [(max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi]
    busy = union_us(inside)
    span = hi - lo
    kern: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in gpu:
        if lo <= float(e["ts"]) < hi:
            k = kern[e["name"][:90]]
            k[0] += float(e["dur"])
            k[1] += 1
    host: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime") \
                and lo <= float(e["ts"]) < hi:
            h = host[f"{e.get('cat')}: {e['name'][:80]}"]
            h[0] += float(e["dur"])
            h[1] += 1
    g = sorted(gaps(inside), reverse=True)
    py = python_times([e for e in events if e.get("cat") == "python_function"
                       and lo <= float(e["ts"]) < hi])
    return {
        "step_marker": marker, "steps": n_steps, "step_ms": span / n_steps / 1e3,
        "gpu_busy_ms_per_step": busy / n_steps / 1e3, "gpu_busy_frac": busy / span,
        "idle_gaps_over_50us_per_step": sum(1 for x in g if x > 50) / n_steps,
        "idle_ms_in_gaps_over_50us_per_step": sum(x for x in g if x > 50) / n_steps / 1e3,
        "largest_gaps_us": [round(x) for x in g[:10]],
        "kernels": [(n, round(t / n_steps), int(c / n_steps)) for n, (t, c) in
                    sorted(kern.items(), key=lambda kv: -kv[1][0])[:top]],
        "host": [(n, round(t / n_steps), round(c / n_steps, 1)) for n, (t, c) in
                 sorted(host.items(), key=lambda kv: -kv[1][0])[:top]],
        "python": [(n, round(inc / n_steps), round(own / n_steps), round(c / n_steps, 1))
                   for n, (inc, own, c) in
                   sorted(py.items(), key=lambda kv: -kv[1][1])[:top]],
        "python_inclusive": [(n, round(inc / n_steps), round(own / n_steps),
                              round(c / n_steps, 1)) for n, (inc, own, c) in
                             sorted(py.items(), key=lambda kv: -kv[1][0])[:top]],
    }


def python_times(events: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Python calls traced by the profiler (``--profile-stack``), by function:
    [inclusive us, self us, calls]. Calls nest per thread; a call's self time is its
    duration minus its direct children's."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_tid[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        own = [float(e["dur"]) for e in evs]
        stack: list[int] = []
        for i, e in enumerate(evs):
            ts = float(e["ts"])
            while stack and float(evs[stack[-1]]["ts"]) + float(evs[stack[-1]]["dur"]) <= ts:
                stack.pop()
            if stack:
                own[stack[-1]] -= float(e["dur"])
            stack.append(i)
        for e, o in zip(evs, own):
            name = _short(e["name"])
            rec = out[name]
            rec[0] += float(e["dur"])
            rec[1] += o
            rec[2] += 1
    return out


def _short(name: str) -> str:
    """A traced call's name without the install prefix (``.../site-packages/``) and
    without object addresses (``<built-in method to of Tensor object at 0x...>``)."""
    for cut in ("site-packages/", "dist-packages/"):
        if cut in name:
            name = name.split(cut, 1)[1]
    return re.sub(r" (of [\w.]+ object )?at 0x[0-9a-fA-F]+", "", name)[:100]


def render(name: str, s: dict[str, Any]) -> str:
    if not s.get("steps"):
        return f"## {name}\nno steps found\n"
    lines = [f"## {name}",
             f"{s['steps']} steps (marker {s['step_marker']!r}): {s['step_ms']:.2f} ms a step, "
             f"GPU busy {s['gpu_busy_ms_per_step']:.2f} ms ({100 * s['gpu_busy_frac']:.0f}%); "
             f"idle gaps > 50 us: {s['idle_gaps_over_50us_per_step']:.1f} a step, "
             f"{s['idle_ms_in_gaps_over_50us_per_step']:.2f} ms; largest (us): "
             f"{s['largest_gaps_us']}",
             "", "| kernel (per step) | us | launches |", "|---|---|---|"]
    lines += [f"| {n} | {t} | {c} |" for n, t, c in s["kernels"]]
    lines += ["", "| host op / annotation (per step) | us | calls |", "|---|---|---|"]
    lines += [f"| {n} | {t} | {c} |" for n, t, c in s["host"]]
    if s.get("python"):
        lines += ["", "| Python call (per step, by self time) | inclusive us | self us | "
                  "calls |", "|---|---|---|---|"]
        lines += [f"| {n} | {i} | {o} | {c} |" for n, i, o, c in s["python"]]
        lines += ["", "| Python call (per step, by inclusive time; recursion counts "
                  "twice) | inclusive us | self us | calls |", "|---|---|---|---|"]
        lines += [f"| {n} | {i} | {o} | {c} |" for n, i, o, c in s["python_inclusive"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, default=None, help="also write the summaries here")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    for folder in args.folders:
        for path in sorted(folder.rglob("*.pt.trace.json*")):
            s = summarise(load(path), args.top)
            out[str(path.relative_to(folder))] = s
            print(render(str(path.relative_to(folder)), s), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

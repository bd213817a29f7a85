"""The profile summariser's arithmetic, on a hand-made trace with known answers."""

import gzip
import json

from granikv_engine.bench.trace_summary import load, summarise, union_us


def _x(name, cat, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur}


def test_union_counts_overlaps_once():
    assert union_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25


def test_steps_busy_time_and_gaps(tmp_path):
    ev = [_x(f"execute_context_0(0)_generation_{t}({t})", "user_annotation", t, 5)
          for t in (0, 1000, 2000)]
    ev += [_x("execute_model", "cpu_op", 1500, 5)]  # not an annotation: no step
    ev += [_x("k", "kernel", 100, 300), _x("k", "kernel", 350, 100),  # 350 busy, step 1
           _x("k", "kernel", 1100, 200), _x("copy", "gpu_memcpy", 1800, 100)]  # 300, step 2
    ev += [_x("k", "kernel", 2100, 999)]  # after the last marker: not a whole step
    p = tmp_path / "a.pt.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev + [{"ph": "i", "name": "noise"}]}, f)
    s = summarise(load(p))
    assert s["steps"] == 2 and s["step_marker"] == "execute_context"
    assert abs(s["step_ms"] - 1.0) < 1e-9
    assert abs(s["gpu_busy_ms_per_step"] - 0.325) < 1e-9
    # gaps between busy stretches inside [0, 2000): 450->1100, 1300->1800
    assert s["largest_gaps_us"] == [650, 500]
    assert s["kernels"][0] == ("k", 300, 1)

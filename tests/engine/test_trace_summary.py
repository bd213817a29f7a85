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


def test_python_self_time_subtracts_direct_children_per_thread(tmp_path):
    def py(name, ts, dur, tid=1):
        return {**_x(name, "python_function", ts, dur), "pid": 7, "tid": tid}

    ev = [_x(f"execute_context_0(0)_generation_{t}({t})", "user_annotation", t, 5)
          for t in (0, 1000)]
    ev += [py("site-packages/vllm/a.py(1): outer", 10, 500),
           py("site-packages/vllm/b.py(2): inner", 20, 100),
           py("site-packages/vllm/b.py(2): inner", 200, 100),
           py("site-packages/vllm/c.py(3): leaf", 210, 40),  # inside the second inner
           py("site-packages/vllm/b.py(2): inner", 600, 50),  # after outer ends: top level
           py("site-packages/vllm/a.py(1): outer", 15, 30, tid=2)]  # another thread
    p = tmp_path / "b.pt.trace.json"
    p.write_text(json.dumps(ev))
    s = summarise(load(p))
    got = {n: (i, o, c) for n, i, o, c in s["python"]}
    assert got["vllm/a.py(1): outer"] == (530, 330, 2)  # 500 - 2*100, plus 30 on tid 2
    assert got["vllm/b.py(2): inner"] == (250, 210, 3)  # 100 + (100 - 40) + 50
    assert got["vllm/c.py(3): leaf"] == (40, 40, 1)


def test_python_names_drop_install_prefix_and_addresses():
    from granikv_engine.bench.trace_summary import _short

    assert _short("/usr/lib/python3/dist-packages/vllm/x.py(3): f") == "vllm/x.py(3): f"
    assert (_short("<built-in method to of Tensor object at 0x7f5b45970730>")
            == _short("<built-in method to of Tensor object at 0x7f5b4597d810>")
            == "<built-in method to>")

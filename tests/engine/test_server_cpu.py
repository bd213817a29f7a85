"""The per-process CPU meter of bench/server_cpu.py: it finds processes by their command
line, reads their CPU time from /proc, and refuses a pattern that matches nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from granikv_engine.bench import online, server_cpu

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n" \
       "time.sleep(30)  # granikv-cpu-meter-test\n"


def test_a_busy_process_is_found_and_its_cpu_time_read() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        deadline = time.time() + 20
        while time.time() < deadline and server_cpu.cpu_seconds(child.pid) < 0.6:
            time.sleep(0.1)
        assert server_cpu.processes("granikv-cpu-meter-test") == [child.pid]
        used = server_cpu.cpu_seconds(child.pid)
        assert 0.6 <= used < 5.0, used
        snap = server_cpu.snapshot({"burner": [child.pid]})
        assert snap["burner"] == pytest.approx(used, abs=0.05)
    finally:
        child.kill()
        child.wait()


def test_a_pattern_that_matches_nothing_is_an_error() -> None:
    target = online.Target("http://127.0.0.1:9", "stock", "m", {})
    work = online.Workload("W", {"t": "ctx"}, (online.Turn(0, "t", "hi", 2),))
    with pytest.raises(SystemExit, match="no process matches"):
        server_cpu.measure(target, work, {"nothing": "no-such-process-granikv-xyz"})


def run(label: str, side: str, si: int, front: dict[str, float],
        other: dict[str, float]) -> dict[str, object]:
    procs = {n: {"cpu_ms_per_token": v, "net_ms_per_token": v}
             for n, v in {**front, **other}.items()}
    return {"label": label, "side": side, "stream_interval": si, "front": list(front),
            "front_net_ms_per_token": round(sum(front.values()), 4), "processes": procs,
            "summary": {"output_tok_s": 100.0}}


def test_the_report_sums_the_front_end_and_compares_it_with_vllm_serve() -> None:
    from granikv_engine.bench.server_cpu_report import front_ratio, table

    stock1 = run("vllm serve, 1", "stock", 1, {"api_server": 0.1}, {"engine_core": 2.0})
    stock16 = run("vllm serve, 16", "stock", 16, {"api_server": 0.05}, {})
    plat1 = run("platform, 1", "platform", 1, {"replica": 0.12, "proxy": 0.03},
                {"engine_core": 2.0})
    plat16 = run("platform, 16", "platform", 16, {"replica": 0.04, "proxy": 0.01}, {})
    runs = [stock1, stock16, plat1, plat16]
    assert front_ratio(plat1, runs) == pytest.approx(1.5)
    assert front_ratio(plat16, runs) == pytest.approx(1.0)
    assert front_ratio(stock1, runs) == pytest.approx(1.0)
    assert front_ratio(plat1, [plat1]) is None  # no vllm serve run to compare with
    rows = table(runs).splitlines()
    assert "0.15 (replica+proxy; 1.50x)" in rows[4] and "| 2.0 (2.0) |" in rows[4]

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

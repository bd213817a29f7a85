"""`python -m granikv_agents.cli run --once`: what `make run` does, end to end, in its
own Ray cluster (a subprocess, as a newcomer runs it): the example agent team runs
through the app's /teams/red/runs, and its answers and the GraniKV statistics print."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from granikv_platform.loader import load_serve_config
from tests.platform.conftest import free_port

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
REPO = Path(__file__).resolve().parents[2]


def test_run_once_prints_answers_and_statistics() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "GRANIKV_CONFIG", "GRANIKV_API_KEYS_FILE")}
    tmp = tempfile.mkdtemp(prefix="gkvc-", dir="/tmp")  # its own cluster, its own files
    # TMPDIR: the agents' run store (deploy/local.yaml: <tmp>/granikv-granikv-runs.sqlite).
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=tmp,
               TMPDIR=tmp)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "granikv_agents.cli", "run", "--once",
             "--port", str(free_port()), "--max-tokens", "8",
             "--allow-ray-auth-disabled"],  # as the suite's cluster
            cwd=REPO, env=env, capture_output=True, text=True, timeout=480)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    # The start-up says each stage as it happens, and where the server's logs are.
    n = load_serve_config(REPO / "deploy" / "local.yaml").apps[0].config.replicas.num_replicas
    stages = [r"Ray: a local cluster on 127\.0\.0\.1; the server's logs: /\S+/logs ",
              r"Serve: HTTP on 127\.0\.0\.1:\d+; deploying granikv",
              rf"granikv/granikv-llm: 0 of {n} replicas? ready \({n} starting\)",
              rf"granikv/granikv-llm: {n} of {n} replicas? ready$",
              r"granikv: ready \(\d LLM replica\(s\) reported\)",
              r"serving tiny-llama at "]
    at = [re.search(r"^(?:\[ *\d+ s\] )?" + s, out, re.M) for s in stages]
    said = "\n".join(ln for ln in out.splitlines() if re.match(r"\[ *\d+ s\] ", ln))
    assert all(at), f"{[s for s, m in zip(stages, at) if m is None]} not in:\n{said}"
    assert [m.start() for m in at if m] == sorted(m.start() for m in at if m), said
    assert re.search(r"^\[ *\d+ s\] registry: granikv-registry is up$", out, re.M), said
    # The example map-reduce team ran through the agents layer (REST + SSE events).
    assert re.search(r"team 'red': run run-\w+ of 9 agents \(map_reduce\)", out), out
    assert re.search(r"team 'red': context red-context-\w+ \(\d{3} tokens\) is READY", out), out
    for agent in ("isolation", "capacity", "errors", "metrics", "restarts", "latency", "docs",
                  "tests", "synthesizer"):
        assert f"  [{agent}] " in out, agent
    assert re.search(r"run run-\w+ succeeded, 9 agent turns", out), out
    # No keys file configured: keys made for this run, printed, used by the demo.
    assert "API keys for this run" in out, out
    assert re.search(r"^  red +gk-[\w-]{40,}$", out, re.M), out
    assert re.search(r"^  @admin +gk-[\w-]{40,}$", out, re.M), out
    assert "GraniKV statistics:" in out and "dispatcher:" in out and "tokens/s" in out
    assert re.search(r"prefix hits: .*red-context-\w+ \(red\) 9", out), out
    m = re.search(r"totals: (\d+) HOT hits, (\d+) bind errors", out)
    assert m is not None and int(m.group(1)) >= 9 and int(m.group(2)) == 0, out

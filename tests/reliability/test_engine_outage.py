"""Start-up, outages and what the app tells clients, on the session app (its two CPU
LLM replicas). The last two tests restart replicas and wait until the app recovered.

- Every replica warmed up (a real chat and completion) before it first reported, so
  before /readyz said ready.
- /metrics carries vLLM's own families per replica and per-team families; a request id
  given by the client comes back in the header and in an error body.
- An engine core killed under a replica: requests get 200 (the other replica) or 503
  with Retry-After, never a 500; its streams in flight end with the same 503 as an
  error event; the replica's process ends within about a second, so that Serve
  replaces it (a failing health check would take three periods), and leaves none of
  its engine's files.
- Every LLM replica gone at once: a request gets a 503 with Retry-After within
  ``replicas.replica_wait_s``, not a wait until a replica is back.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from granikv_platform.engine_files import RECORDS_DIR
from granikv_platform.names import REPLICA_HEADER
from tests.conftest import ADMIN, APP, auth, stats, wait_until
from tests.reliability.figures import record
from tests.reliability.test_load import two_replicas

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
BODY = {"model": MODEL, "prompt": "count: one two", "max_tokens": 2, "ignore_eos": True}


def kill_llm_replica(replica: str) -> None:
    import ray

    (name,) = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
               if a["name"] == f"SERVE_REPLICA::{APP}#{APP}-llm#{replica}"]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def engine_record(replica_pid: int) -> dict[str, Any]:
    """The record of the files of a replica's engine (``EngineFiles.of_children``)."""
    for path in (Path(tempfile.gettempdir()) / RECORDS_DIR).glob("*.json"):
        record: dict[str, Any] = json.loads(path.read_text())
        if record["owners"][0][0] == replica_pid:
            return {**record, "path": str(path)}
    raise AssertionError(f"no record of replica {replica_pid}'s engine files")


def still_there(files: list[str]) -> list[str]:
    return [f for f in files if os.path.lexists(f)]


def shm_mb(files: list[str]) -> int:
    """The apparent size of the /dev/shm files among ``files``, in MB."""
    total = 0
    for f in files:
        if f.startswith("/dev/shm/"):
            with suppress(OSError):
                total += os.stat(f).st_size
    return round(total / 1e6)


def open_streams(c: httpx.Client, stack: ExitStack, victim: str,
                 on_victim: int) -> list[tuple[str, str, Any]]:
    """Streams until ``on_victim`` of them are on the replica ``victim``, each past its
    first chunk: (replica, request id, its lines)."""
    body = {"model": MODEL, "prompt": "count: one two", "max_tokens": 64, "n": 2,
            "ignore_eos": True, "stream": True}
    opened: list[tuple[str, str, Any]] = []
    while sum(rep == victim for rep, _, _ in opened) < on_victim:
        assert len(opened) < 32, "Serve sent 32 streams to one replica"
        rid = f"dead-engine-{len(opened)}"
        s = stack.enter_context(c.stream("POST", "/v1/completions", json=body,
                                         headers={"x-request-id": rid}))
        assert s.status_code == 200, s.read()
        lines = s.iter_lines()
        assert next(ln for ln in lines if ln.startswith("data: ")) != "data: [DONE]"
        opened.append((s.headers[REPLICA_HEADER], rid, lines))
    return opened


def test_replicas_warm_up_before_they_report(base_url: str) -> None:
    for rid, rep in stats(base_url)["replicas"].items():
        assert set(rep["warmup_s"]) == {"chat", "completion"}, (rid, rep.get("warmup_s"))
    record("warmup", per_replica_s={r: rep["warmup_s"]
                                    for r, rep in stats(base_url)["replicas"].items()})


def test_metrics_have_vllms_families_and_teams(base_url: str) -> None:
    with httpx.Client(base_url=base_url, headers=auth("red"), timeout=120) as c:
        assert c.post("/v1/completions", json=BODY).status_code == 200
    time.sleep(2)  # a report after the request
    text = httpx.get(f"{base_url}/metrics", headers=ADMIN, timeout=30).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "vllm:prompt_tokens", "vllm:generation_tokens"):
        assert len({s.labels["replica"] for s in fams[name].samples}) == 2, name
    red = [s for s in fams["granikv_team_requests"].samples if s.labels["team"] == "red"]
    assert sum(s.value for s in red) >= 1
    teams = {s.labels["team"] for s in fams["granikv_team_requests"].samples}
    assert teams <= {"red", "blue", "gold", "green", "fuzz", "chaos", "bench", "plain",
                     "_other"}, teams


def test_the_clients_request_id_comes_back(base_url: str) -> None:
    r = httpx.get(f"{base_url}/v1/prefixes/none-such", timeout=30,
                  headers={**auth("red"), "x-request-id": "client-req-7"})
    assert r.status_code == 404 and r.headers["x-request-id"] == "client-req-7"
    assert r.json()["error"]["request_id"] == "client-req-7"


def engine_core(replica_pid: int) -> psutil.Process:
    procs = [p for p in psutil.Process(replica_pid).children(recursive=True)
             if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
    assert len(procs) == 1, [(p.pid, p.name()) for p in procs]
    return procs[0]


def test_a_dead_engine_is_503_at_once_and_its_replica_replaced(base_url: str) -> None:
    old = two_replicas(base_url)
    victim = sorted(old)[0]
    pid = stats(base_url)["replicas"][victim]["pid"]  # the replica's process
    core = engine_core(pid)
    files = engine_record(pid)
    assert still_there(files["files"]), files
    exited: list[float] = []
    c = httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120)
    stack = ExitStack()
    streams = open_streams(c, stack, victim, on_victim=3)

    def watch() -> None:  # when the replica's process ends
        while not gone(pid) and time.monotonic() - t_kill < 120:
            time.sleep(0.1)
        exited.append(time.monotonic() - t_kill)

    t_kill = time.monotonic()
    core.kill()
    watcher = threading.Thread(target=watch)
    watcher.start()
    with stack:
        ends = [(rid, [ln for ln in lines if ln.startswith("data: ")])
                for rep, rid, lines in streams if rep == victim]
    c.close()
    codes: list[tuple[int, str | None]] = []

    def one(_: int) -> tuple[int, str | None]:
        with httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120) as c:
            r = c.post("/v1/completions", json=BODY)
            return r.status_code, r.headers.get("retry-after")

    with ThreadPoolExecutor(4) as pool:
        while time.monotonic() - t_kill < 8:
            codes += list(pool.map(one, range(8)))
    watcher.join()
    t_exit = exited[0]
    assert all(code in (200, 503) for code, _ in codes), codes
    assert all(ra is not None for code, ra in codes if code == 503), codes
    cut = [(rid, events) for rid, events in ends if any(e.startswith('data: {"error"')
                                                         for e in events)]
    assert cut, ends  # the victim's streams in flight: the dead engine's 503 event
    for rid, events in cut:
        assert events[-1] == "data: [DONE]", events[-3:]
        err = json.loads(events[-2].removeprefix("data: "))["error"]
        assert err["code"] == 503 and err["type"] == "ServiceUnavailableError", err
        assert err["request_id"] == rid and "retry" in err["message"], err
    assert t_exit < 2.5, t_exit  # about a second; a failing health check: 3 x 10 s
    assert not still_there(files["files"] + [files["path"]]), files

    def replaced() -> set[str] | None:
        ids = set(stats(base_url)["replicas"])
        return ids if len(ids) == 2 and victim not in ids else None

    wait_until(replaced, 600, "Serve to replace the replica", every_s=1.0)
    t_back = time.monotonic() - t_kill
    record("fault_engine_dead", requests=len(codes),
           answered_200=sum(c == 200 for c, _ in codes),
           answered_503=sum(c == 503 for c, _ in codes),
           answered_other=sum(c not in (200, 503) for c, _ in codes),
           streams_cut_503=len(cut), replica_exit_s=round(t_exit, 2),
           engine_files_left=0, replaced_s=round(t_back, 1))


def test_an_outage_of_every_replica_is_a_prompt_503(base_url: str,
                                                    app_config: dict[str, Any]) -> None:
    wait_s = float(app_config["replicas"].get("replica_wait_s", 10.0))
    old = two_replicas(base_url)
    for rid in old:
        kill_llm_replica(rid)
    t_kill = time.monotonic()
    answers = []
    with httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=300) as c:
        for pause in (0.0, 3.0):  # at once, and once Serve knows both are gone
            time.sleep(pause)
            t0 = time.monotonic()
            r = c.post("/v1/completions", json=BODY)
            answers.append((r.status_code, round(time.monotonic() - t0, 1)))
            assert r.status_code == 503, (r.status_code, r.text, answers)
            assert r.headers.get("retry-after") and r.json()["error"]["request_id"]
    assert all(took < wait_s + 5 for _, took in answers), answers

    def back() -> set[str] | None:  # the replicas serve /v1/granikv/stats too: 503 until
        r = httpx.get(f"{base_url}/v1/granikv/stats", headers=ADMIN, timeout=60)
        ids = set(r.json()["replicas"]) if r.status_code == 200 else set()
        return ids if len(ids) == 2 and not ids & old else None

    wait_until(back, 900, "two new replicas", every_s=2.0)
    record("fault_all_replicas_down", answers=answers, replica_wait_s=wait_s,
           recovered_s=round(time.monotonic() - t_kill, 1))

"""An LLM replica killed while it streams, and during a team run (last in this folder:
they restart replicas of the session app, and wait until the app has recovered).

The replicas are the app's ingress: a client's stream is served by one of them, through
Serve's proxy. Killed in the middle of streams, a replica's streams end with an
OpenAI-shaped error event (503, the request's id) and ``data: [DONE]``, not a cut
connection; the other replica's streams finish; the next request is served by the live
replica, at once. The killed replica unlinks nothing: its engine's shared-memory
segments and IPC socket files are removed by the replica that Serve starts in its
place, from the record the killed one wrote.

The run (team ``chaos``: eight reviewers in parallel, four at a time, then a
synthesizer) goes through the run service, which calls the LLM replicas through a Serve
handle. One LLM replica is killed (``ray.kill``, no restart of the actor: Serve must
start a new one) once some turns have finished and others are in flight. Then:

- Serve starts a new replica, which re-pins every pinned prefix of the registry (all
  teams' contexts and prefixes) before it reports, and serves the team from HOT;
- the run goes on from its checkpoint: the turns in flight on the dead replica fail
  (a transient error) and the graph's retry policy runs them again on a live replica;
  the turns saved before the kill are neither lost nor run again; the run succeeds in
  its first attempt;
- every finished turn appears exactly once in the run's event log and in its state.

While Serve is still starting the new LLM replica, a second run loses its executor too
(the agents deployment, killed): the new executor resumes that run from its SQLite
checkpoint (attempt 2); the turns saved before the kill do not run again.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from granikv_agents import load_spec
from granikv_platform.names import REPLICA_HEADER
from tests.agents.helpers import wait_run
from tests.conftest import APP, REPO, TEAMS, auth, counters, stats, wait_until
from tests.reliability.figures import record
from tests.reliability.test_engine_outage import (
    engine_record,
    gone,
    shm_mb,
    still_there,
)
from tests.reliability.test_load import two_replicas

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


def review_as_chaos() -> dict[str, Any]:
    spec = load_spec(REPO / "deploy" / "teams" / "review.yaml")
    return spec.model_copy(update={
        "team": "chaos", "limits": spec.limits.model_copy(update={"concurrency": 4}),
        "sampling": spec.sampling.model_copy(update={"max_tokens": 48})}).model_dump(mode="json")


def turn_events(c: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    with c.stream("GET", f"/teams/chaos/runs/{run_id}/events") as s:
        events = [json.loads(line[6:]) for line in s.iter_lines()
                  if line.startswith('data: {"seq"')]
    return events


def registry_pinned(base_url: str) -> int:
    n = 0
    for team in TEAMS:
        with httpx.Client(base_url=base_url, headers=auth(team), timeout=60) as c:
            n += sum(1 for p in c.get("/v1/prefixes").json()["data"] if p["pinned"])
    return n


def kill_replica(deployment: str, replica: str | None = None) -> str:
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith(f"SERVE_REPLICA::{APP}#{APP}-{deployment}#")
             and (replica is None or a["name"].endswith(f"#{replica}"))]
    assert len(names) == 1, names
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    return names[0]


def executor_lost_mid_run(c: httpx.Client) -> dict[str, Any]:
    """A second run; its executor (the agents deployment) is killed once some turns are
    saved. Serve starts a new executor, which resumes the run from its checkpoint: the
    saved turns do not run again, the others run once."""
    start = c.post("/teams/chaos/runs", json={"spec": review_as_chaos()})
    assert start.status_code == 201, start.text
    run_id = start.json()["run_id"]

    def some_turns_done() -> list[dict[str, Any]] | None:
        r = c.get(f"/teams/chaos/runs/{run_id}")
        turns = r.json()["turns"] if r.status_code == 200 else []
        return turns if 2 <= len(turns) < 8 else None

    done_before = wait_until(some_turns_done, 120, "two finished turns", every_s=0.05)
    kill_replica("agents")
    view = wait_run(c, "chaos", run_id, timeout_s=300)
    assert view["status"] == "succeeded" and view["attempts"] == 2, view
    keys = assert_each_turn_once_and_saved_unchanged(view, done_before)
    log = turn_events(c, run_id)
    statuses = [(e["status"], e.get("error")) for e in log if e["type"] == "status"]
    assert statuses == [("running", None), ("interrupted", "the executor stopped mid-run"),
                        ("resumed", None), ("succeeded", None)], statuses
    resumed_at = next(e["seq"] for e in log if e["type"] == "status"
                      and e["status"] == "resumed")
    after = Counter((e["agent"], e["round"], e["kind"]) for e in log
                    if e["type"] == "turn" and e["seq"] > resumed_at)
    saved = {(t["agent"], t["round"], t["kind"]) for t in done_before}
    assert not saved & set(after), (saved, after)  # the saved turns did not run again
    logged = Counter((e["agent"], e["round"], e["kind"]) for e in log if e["type"] == "turn")
    assert set(logged) == set(keys) and set(logged.values()) == {1}, logged
    # Saved by the killed executor but not yet in its log: reported by the new one, once,
    # before it resumed (events.unreported_events).
    recovered = [e for e in log if e["type"] == "turn" and e.get("recovered")]
    assert all(e["seq"] < resumed_at for e in recovered), recovered
    return {"run_turns": len(keys), "turns_saved_before_kill": len(done_before),
            "turns_run_after_resume": sum(after.values()),
            "turns_recovered_on_resume": len(recovered), "run_attempts": view["attempts"]}


def finished(events: list[str]) -> bool:
    """Whether a chunk among ``events`` (``data: {...}`` lines) finished its choice."""
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e != "data: [DONE]"]
    return any(ch.get("finish_reason") for c in chunks for ch in c.get("choices", ()))


def test_streams_of_a_killed_replica_end_with_an_error_event(base_url: str) -> None:
    old = two_replicas(base_url)
    body = {"model": "tiny-llama", "prompt": "count: one two", "max_tokens": 64,
            "ignore_eos": True, "stream": True}
    c = httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120)
    with ExitStack() as streams:
        opened: list[tuple[str, str, Any]] = []
        while len({rep for rep, _, _ in opened}) < 2:  # streams on both replicas
            assert len(opened) < 32, "Serve sent 32 streams to one replica"
            rid = f"kill-{len(opened)}"
            s = streams.enter_context(c.stream("POST", "/v1/completions", json=body,
                                               headers={"x-request-id": rid}))
            assert s.status_code == 200, s.read()
            lines = s.iter_lines()
            assert next(ln for ln in lines if ln.startswith("data: ")) != "data: [DONE]"
            opened.append((s.headers[REPLICA_HEADER], rid, lines))
        victim = opened[-1][0]  # its newest stream has most of its tokens ahead
        record_of_victim = engine_record(stats(base_url)["replicas"][victim]["pid"])
        files = record_of_victim["files"]
        victim_mb = shm_mb(files)
        t_kill = time.monotonic()
        kill_replica("llm", victim)
        ends = [(rep, rid, [ln for ln in lines if ln.startswith("data: ")])
                for rep, rid, lines in opened]
    on_victim = [(rid, events) for rep, rid, events in ends if rep == victim]
    lost = [(rid, events) for rid, events in on_victim if not finished(events)]
    kept = [events for rep, _, events in ends if rep != victim]
    assert lost and kept, [(rep, finished(events)) for rep, _, events in ends]
    for rid, events in lost:  # cut mid-stream: the error event, then [DONE]
        assert events[-1] == "data: [DONE]", events[-3:]
        err = json.loads(events[-2].removeprefix("data: "))["error"]
        assert err["code"] == 503 and err["request_id"] == rid, err
        assert err["type"] == "ServiceUnavailableError" and "retry" in err["message"]
    for events in kept:  # the live replica's streams finish
        assert events[-1] == "data: [DONE]" and finished(events[-2:-1]), events[-3:]
    t0 = time.monotonic()
    r = c.post("/v1/completions", json={**body, "stream": False, "max_tokens": 2})
    took = time.monotonic() - t0
    assert r.status_code == 200 and r.headers[REPLICA_HEADER] != victim, r.text
    c.close()

    def replaced() -> set[str] | None:
        s = set(stats(base_url)["replicas"])
        return s if len(s) == 2 and victim not in s else None

    # what the kill left once the killed replica's engine ended (its engine core
    # follows its replica: parent_watch); the new replica removes it once it started
    pids = [pid for pid, _ in record_of_victim["owners"]]
    wait_until(lambda: all(gone(p) for p in pids), 60, "the killed engine to end")
    left = still_there(files)
    left_mb = shm_mb(left)
    wait_until(replaced, 300, "Serve to replace the killed replica", every_s=1.0)
    t_back = time.monotonic() - t_kill
    assert not still_there(files), still_there(files)  # removed by the new replica
    record("fault_replica_killed_mid_stream", streams=len(ends), streams_cut=len(lost),
           streams_on_the_victim_finished_before=len(on_victim) - len(lost),
           streams_finished=len(kept), next_request_s=round(took, 2),
           replaced_s=round(t_back, 1), replicas_before=len(old),
           victim_engine_files=len(files), victim_shm_mb=victim_mb,
           files_left_by_the_kill=len(left), shm_mb_left_by_the_kill=left_mb,
           engine_files_left_after_replacement=0)


def test_killed_llm_replica_during_a_team_run(base_url: str) -> None:
    c = httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120)
    old = two_replicas(base_url)  # a report can be late on a busy machine: wait for both
    start = c.post("/teams/chaos/runs", json={"spec": review_as_chaos()})
    assert start.status_code == 201, start.text
    run_id = start.json()["run_id"]

    def some_turns_done() -> list[dict[str, Any]] | None:
        view = c.get(f"/teams/chaos/runs/{run_id}").json()
        return view["turns"] if 2 <= len(view["turns"]) < 8 else None

    done_before = wait_until(some_turns_done, 120, "two finished turns", every_s=0.05)
    reps = stats(base_url)["replicas"]
    victim = max(reps, key=lambda r: reps[r]["inflight"])  # the busier one
    victim_inflight = reps[victim]["inflight"]  # as last reported (every 0.5 s)
    t_kill = time.monotonic()
    kill_replica("llm", victim)

    view = wait_run(c, "chaos", run_id, timeout_s=300)
    t_run = time.monotonic() - t_kill
    # While Serve replaces the LLM replica (one replica serves meanwhile), the worse case:
    # the run executor dies too, in the middle of a second run.
    second = executor_lost_mid_run(c)

    def replaced() -> dict[str, Any] | None:
        s = stats(base_url)["replicas"]
        return s if len(s) == 2 and victim not in s and len(set(s) - old) == 1 else None

    now = wait_until(replaced, 300, "Serve to replace the killed replica", every_s=1.0)
    t_replaced = time.monotonic() - t_kill
    (new,) = set(now) - old

    # The run: one attempt, every turn once, the turns saved before the kill unchanged.
    assert view["status"] == "succeeded" and view["attempts"] == 1, view
    keys = assert_each_turn_once_and_saved_unchanged(view, done_before)
    log = turn_events(c, run_id)
    logged = Counter((e["agent"], e["round"], e["kind"]) for e in log if e["type"] == "turn")
    assert set(logged) == set(keys) and set(logged.values()) == {1}, logged
    statuses = [e["status"] for e in log if e["type"] == "status"]
    assert statuses == ["running", "succeeded"], statuses

    # The new replica holds every pinned prefix of the registry, and hits HOT with them.
    pinned = registry_pinned(base_url)
    assert now[new]["pinned_prefixes"] == pinned, (now[new]["pinned_prefixes"], pinned)
    assert now[new]["granikv"]["prefixes"]["ready"] >= pinned
    before_new = counters(now[new])
    body = {"model": "tiny-llama", "max_tokens": 2,
            "messages": [{"role": "user", "content": "after the restart"}]}

    def new_replica_hit() -> bool:
        for _ in range(4):
            r = c.post("/teams/chaos/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
        rep = stats(base_url)["replicas"].get(new)
        return rep is not None and counters(rep)["hits"] > before_new["hits"]

    wait_until(new_replica_hit, 60, "a HOT hit on the new replica", every_s=0.5)
    after = counters(stats(base_url)["replicas"][new])
    assert after["bind_errors"] == 0 and after["cold_fallbacks"] == before_new["cold_fallbacks"]
    c.close()
    record("fault_replica_kill", faults_injected=2, run_turns=len(keys),
           turns_done_before_kill=len(done_before), turns_logged_once=len(logged),
           run_attempts=view["attempts"], run_seconds_after_kill=round(t_run, 1),
           replacement_seconds=round(t_replaced, 1), registry_pinned=pinned,
           new_replica_pinned=now[new]["pinned_prefixes"],
           victim_inflight_reported_at_kill=victim_inflight,
           executor_killed_in_second_run=second)


def assert_each_turn_once_and_saved_unchanged(view: dict[str, Any],
                                              done_before: list[dict[str, Any]]
                                              ) -> list[tuple[Any, Any, Any]]:
    """All 9 turns of the run, each once; the turns saved before a kill unchanged."""
    keys = [(t["agent"], t["round"], t["kind"]) for t in view["turns"]]
    assert len(keys) == len(set(keys)) == 9, keys
    final = {(t["agent"], t["round"], t["kind"]): t for t in view["turns"]}
    for t in done_before:
        assert final[(t["agent"], t["round"], t["kind"])] == t, "a saved turn changed"
    return keys

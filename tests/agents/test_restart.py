"""The run executor (the app's agents deployment) killed mid-run: Serve starts a new one,
which finds the run unfinished and resumes it from its checkpoint. The turns that had
finished before the kill are not run again."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from granikv_agents import load_spec
from tests.agents.helpers import delta, settled, wait_run
from tests.conftest import APP, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"


def long_debate() -> dict[str, Any]:
    """debate.yaml for 4 rounds, one turn at a time: 13 calls, a few seconds."""
    spec = load_spec(TEAMS / "debate.yaml")
    return spec.model_copy(update={"limits": spec.limits.model_copy(
        update={"rounds": 4, "concurrency": 1})}).model_dump(mode="json")


def turns_in(events: list[dict[str, Any]]) -> Counter[tuple[str, int, str]]:
    return Counter((e["agent"], e["round"], e["kind"]) for e in events if e["type"] == "turn")


def event_log(c: httpx.Client, team: str, run_id: str) -> list[dict[str, Any]]:
    with c.stream("GET", f"/teams/{team}/runs/{run_id}/events") as s:
        return [json.loads(line[6:]) for line in s.iter_lines()
                if line.startswith("data: {\"seq\"")]


def test_killed_executor_resumes_the_run_from_its_checkpoint(client: Client,
                                                             base_url: str) -> None:
    import ray

    gold = client("gold")
    before = settled(base_url)
    run_id = gold.post("/teams/gold/runs", json={"spec": long_debate()}).json()["run_id"]

    def three_turns_done() -> list[dict[str, Any]] | None:
        turns = [t for t in gold.get(f"/teams/gold/runs/{run_id}").json()["turns"]]
        return turns if len(turns) >= 3 else None

    done_before = wait_until(three_turns_done, 120, "three finished turns", every_s=0.05)
    (name,) = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
               if a["name"].startswith(f"SERVE_REPLICA::{APP}#{APP}-agents#")]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    view = wait_run(gold, "gold", run_id)  # the new executor resumed it
    assert view["status"] == "succeeded" and view["attempts"] == 2, view
    assert len({(t["agent"], t["round"]) for t in view["turns"]}) == len(view["turns"]) == 13
    log = event_log(gold, "gold", run_id)
    statuses = [(e["status"], e.get("error")) for e in log if e["type"] == "status"]
    assert statuses[0] == ("running", None) and statuses[-1] == ("succeeded", None)
    assert ("interrupted", "the executor stopped mid-run") in statuses
    assert ("resumed", None) in statuses and len(statuses) == 4
    # The turns saved before the kill did not run again; only the rest ran after it.
    resumed_at = next(e["seq"] for e in log if e["type"] == "status" and e["status"] == "resumed")
    after = turns_in([e for e in log if e["seq"] > resumed_at])
    assert not any(after[(t["agent"], t["round"], t["kind"])] for t in done_before), after
    assert 1 <= sum(after.values()) <= 13 - len(done_before), (done_before, after)
    assert set(turns_in(log)) == {(t["agent"], t["round"], t["kind"]) for t in view["turns"]}
    d = delta(settled(base_url), before)
    # At most the one turn in flight at the kill reached the engine twice.
    assert 13 <= d[f"prefix:{view['context']['prefix_id']}"] <= 14, d
    assert "bind_errors" not in d, d

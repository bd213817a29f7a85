"""A run interrupted mid-fan-out resumes from its SQLite checkpoint, in a new executor,
without repeating the agent turns that had finished (the HTTP binding: ChatOpenAI)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from granikv_agents import RunExecutor, TeamSpec, load_spec
from granikv_agents.graph import RetryConfig
from tests.agents.helpers import FaultyBackend, delta, http_backend, settled, totals
from tests.conftest import stats

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"
QUICK = RetryConfig(max_attempts=3, initial_interval_s=0.05, max_interval_s=0.2)


def review_for(team: str) -> TeamSpec:
    return load_spec(TEAMS / "review.yaml").model_copy(update={"team": team})


def test_interrupted_fan_out_resumes_without_repeating_finished_turns(
        base_url: str, tmp_path: Path) -> None:
    spec = review_for("green")
    reviewers = [a.name for a in spec.to_team().workers]
    broken = frozenset({"capacity", "docs"})
    db = str(tmp_path / "runs.sqlite")
    first = FaultyBackend(http_backend(base_url, "green"), fail_once=frozenset({"errors"}),
                          fail=broken, after=len(reviewers) - len(broken))
    before = totals(stats(base_url))

    async def run_until_it_fails() -> tuple[str, dict[str, object]]:
        async with RunExecutor.open(db, lambda _: first, QUICK) as ex:
            rec = await ex.start(spec)
            assert (await ex.wait(rec.run_id, 300)).status == "failed"
            return rec.run_id, await ex.view(rec.run_id)

    run_id, failed = asyncio.run(run_until_it_fails())
    assert "LLMCallError: 400: injected:" in str(failed["error"])
    finished = [t["agent"] for t in failed["turns"]]  # type: ignore[attr-defined]
    assert finished == [r for r in reviewers if r not in broken]  # saved: pending writes
    assert failed["next"] and failed["result"] is None
    assert first.attempts["errors"] == 2 and first.calls["errors"] == 1  # retried in-run

    second = FaultyBackend(http_backend(base_url, "green"))  # a new process, healthy

    async def resume_in_a_new_executor() -> dict[str, object]:
        async with RunExecutor.open(db, lambda _: second, QUICK) as ex:
            assert (await ex.record(run_id)).status == "failed"
            await ex.resume(run_id)
            assert (await ex.wait(run_id, 300)).status == "succeeded"
            events = [e async for e in ex.events(run_id)]
            return {"view": await ex.view(run_id), "events": events}

    out = asyncio.run(resume_in_a_new_executor())
    view = out["view"]
    assert set(second.calls) == {*broken, "synthesizer"}  # only what had not finished
    calls = first.calls + second.calls
    assert calls == Counter({name: 1 for name in [*reviewers, "synthesizer"]})
    assert view["attempts"] == 2 and view["result"]  # type: ignore[index]
    assert [t["agent"] for t in view["turns"]] == [*reviewers, "synthesizer"]  # type: ignore[index]
    turn_events = Counter(e.data["agent"] for e in out["events"] if e.type == "turn")  # type: ignore[attr-defined]
    assert turn_events == calls  # one event per finished turn, none replayed
    assert [e.data["status"] for e in out["events"] if e.type == "status"] == [  # type: ignore[attr-defined]
        "running", "failed", "resumed", "succeeded"]
    # The engine agrees: one HOT hit per turn the platform served, on green's prefix.
    prefix = f"prefix:{view['context']['prefix_id']}"  # type: ignore[index]
    d = delta(settled(base_url), before)
    assert d["hits"] == d[prefix] == sum(calls.values()) == 9, d
    assert "bind_errors" not in d and "cold_fallbacks" not in d, d


def test_a_stopping_executor_drains_and_the_next_one_recovers(base_url: str,
                                                              tmp_path: Path) -> None:
    spec = load_spec(TEAMS / "debate.yaml")
    spec = spec.model_copy(update={"team": "green", "limits": spec.limits.model_copy(
        update={"rounds": 3, "concurrency": 1})})  # 10 turns, one at a time
    db = str(tmp_path / "runs.sqlite")
    first = FaultyBackend(http_backend(base_url, "green"))

    async def stop_after_two_turns() -> str:
        async with RunExecutor.open(db, lambda _: first, QUICK, drain_s=60) as ex:
            rec = await ex.start(spec)
            while sum(first.calls.values()) < 2:
                await asyncio.sleep(0.05)
            return rec.run_id  # leaving the block stops the executor: a drain

    run_id = asyncio.run(stop_after_two_turns())
    second = FaultyBackend(http_backend(base_url, "green"))

    async def recover() -> dict[str, object]:
        async with RunExecutor.open(db, lambda _: second, QUICK) as ex:
            stopped = await ex.record(run_id)
            assert (stopped.status, stopped.error) == ("interrupted",
                                                       "stopped: executor stopping")
            assert await ex.recover() == [run_id]
            assert (await ex.wait(run_id, 300)).status == "succeeded"
            return await ex.view(run_id)

    view = asyncio.run(recover())
    # The drain let the superstep in flight finish (round 1: 3 turns), then stopped.
    assert first.calls == Counter({"proposer": 1, "opposer": 1, "skeptic": 1})
    # The next executor ran rounds 2 and 3 and the judge; round 1 was not run again.
    assert second.calls == Counter({"proposer": 2, "opposer": 2, "skeptic": 2, "judge": 1})
    assert len(view["turns"]) == 10 and view["attempts"] == 2  # type: ignore[arg-type,index]

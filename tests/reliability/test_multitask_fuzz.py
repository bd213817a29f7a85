"""Concurrent multitask strategies on one thread, fuzzed (hypothesis) against the thread
executor on SQLite with a model held at a gate: each example is a sequence of bursts,
each burst a set of operations started at once (runs with ``reject``, ``enqueue`` or
``interrupt``; cancels of earlier runs, with or without ``wait``), then the gate is
opened and every run waited for.

Checked after every burst (the model still held): at most one run of the thread is
running; a ``reject`` is admitted only on a thread that was idle, and at most one per
burst; every other run is admitted. After the gate opens: no run is pending or running,
the thread is ``idle``, a run interrupted or cancelled ended ``interrupted`` and none of
its answers reached the thread, a run that succeeded has its answer there. At the end a
new executor on the same database resumes nothing. Cases are derandomized unless
GRANIKV_FUZZ_SEED is set; GRANIKV_FUZZ_EXAMPLES scales the count. LangGraph only: no
Serve app.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from granikv_agents.team import Team
from granikv_agents.threads.executor import Conflict, ThreadExecutor
from tests.agents.threads_kit import Held, context_with, own_team
from tests.reliability.figures import record

EXAMPLES = int(os.environ.get("GRANIKV_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("GRANIKV_FUZZ_SEED")
CHAT = own_team("granikv_agents.examples.tools:graph")  # the model, no platform call
TRIED: Counter[str] = Counter()

Op = tuple[str, Any]  # ("run", strategy) | ("cancel", (earlier run index, wait))
OPS = st.one_of(
    st.tuples(st.just("run"), st.sampled_from(["reject", "enqueue", "interrupt"])),
    st.tuples(st.just("cancel"), st.tuples(st.integers(0, 30), st.booleans())))
BURSTS = st.lists(st.lists(OPS, min_size=1, max_size=12), min_size=1, max_size=4)


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield
    record("multitask_fuzz", examples=EXAMPLES, seed=SEED or "derandomized", **dict(TRIED))


def assistants(team: str) -> dict[str, Team]:
    return {"chat": CHAT} if team == "t" else {}


class Thread:
    """One thread under fuzz: its runs in the order they were admitted."""

    def __init__(self, ex: ThreadExecutor, model: Held, tid: str) -> None:
        self.ex, self.model, self.tid = ex, model, tid
        self.runs: list[dict[str, Any]] = []
        self.prompts: dict[str, str] = {}  # run id -> its message
        self.cancelled: set[str] = set()

    async def burst(self, ops: list[Op]) -> None:
        self.model.gate.clear()
        idle = not any(self.ex.slots.live(r["run_id"]) for r in self.runs)
        got = await asyncio.gather(*[self._op(op) for op in ops], return_exceptions=True)
        for op, out in zip(ops, got, strict=True):
            TRIED[f"{op[0]}:{op[1] if op[0] == 'run' else 'wait' if op[1][1] else 'nowait'}"] += 1
            if isinstance(out, BaseException) and not isinstance(out, Conflict):
                raise out
            if op[0] == "run" and op[1] != "reject":
                assert isinstance(out, dict), (op, out)  # enqueue and interrupt: admitted
        rejects = [o for op, o in zip(ops, got, strict=True)
                   if op == ("run", "reject") and isinstance(o, dict)]
        assert len(rejects) <= (1 if idle else 0), (idle, ops, got)
        TRIED["rejects_admitted"] += len(rejects)
        await self._one_running()

    async def _op(self, op: Op) -> Any:
        if op[0] == "run":
            text = f"q-{uuid.uuid4().hex[:6]}"
            run = await self.ex.create_run("t", self.tid, {
                "assistant_id": "chat", "multitask_strategy": op[1],
                "input": {"messages": [{"role": "user", "content": text}]}})
            self.runs.append(run)
            self.prompts[run["run_id"]] = text
            return run
        index, wait = op[1]
        if not self.runs:
            return None
        target = self.runs[index % len(self.runs)]["run_id"]
        try:
            await self.ex.cancel("t", self.tid, target, wait=wait)
        except Conflict:  # it succeeded already
            return None
        self.cancelled.add(target)
        return None

    async def _one_running(self) -> None:
        running = [r for r in await self.ex.list_runs("t", self.tid, limit=1000)
                   if r["status"] == "running"]
        assert len(running) <= 1, running

    async def settle(self) -> None:
        self.model.gate.set()
        for r in self.runs:
            await self.ex.join("t", self.tid, r["run_id"])
        said = [m["content"] for m in (await self.ex.state("t", self.tid))["values"].get(
            "messages", [])]
        for r in await self.ex.list_runs("t", self.tid, limit=1000):
            status, text = r["status"], self.prompts[r["run_id"]]
            assert status in ("success", "interrupted"), r
            TRIED[f"ended_{status}"] += 1
            if status == "success":
                assert f"answer to {text}" in said, (r, said)
                assert r["run_id"] not in self.cancelled, r  # a cancel that took
            else:
                assert f"answer to {text}" not in said, (r, said)
                assert r["error"] == "cancelled", r
        assert (await self.ex.get_thread("t", self.tid))["status"] == "idle"


async def fuzz(url: str, bursts: list[list[Op]]) -> None:
    tid = "th-fuzz"
    model = Held()
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        await ex.create_thread("t", tid)
        thread = Thread(ex, model, tid)
        for ops in bursts:
            await thread.burst(ops)
            await thread.settle()
        said = (await ex.state("t", tid))["values"].get("messages", [])
    again = Held()
    again.gate.set()
    async with ThreadExecutor.open(url, assistants, context_with(again)) as ex:
        await asyncio.sleep(0.05)
        assert again.calls == []  # nothing resumed
        assert (await ex.state("t", tid))["values"].get("messages", []) == said
        live = [r for r in await ex.list_runs("t", tid, limit=1000)
                if r["status"] in ("pending", "running")]
        assert live == []


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=SEED is None,
          suppress_health_check=[HealthCheck.too_slow])
@seed(int(SEED) if SEED else 0)
@given(BURSTS)
def test_concurrent_multitask_strategies(bursts: list[list[Op]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(fuzz(str(Path(d) / "threads.sqlite"), bursts))
    TRIED["examples_run"] += 1

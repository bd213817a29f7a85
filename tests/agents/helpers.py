"""Helpers of the agents' end-to-end tests: engine counters summed over the replicas,
waiting for runs, and a fault injector around a real backend."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from granikv_agents import HttpTeamBackend
from granikv_agents.binding import LLMCallError, Reply, TeamBackend, TransientLLMError, TurnRequest
from granikv_agents.spec_file import load_spec
from granikv_agents.state import ContextPin
from tests.conftest import API_KEYS, counters, fresh_stats, stats

TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"


def http_backend(url: str, team: str) -> HttpTeamBackend:
    """The HTTP binding (ChatOpenAI) as the team, with its API key."""
    return HttpTeamBackend(url, team, api_key=API_KEYS[team])


def fresh_review() -> dict[str, Any]:
    """review.yaml with a context no earlier test registered (so this run must)."""
    spec = load_spec(TEAMS / "review.yaml")
    return spec.model_copy(update={
        "context": f"{spec.context}\nSession {uuid.uuid4().hex}."}).model_dump(mode="json")


def same_pin(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same pinned HOT prefix (its HOT slot differs per replica)."""
    keys = ("prefix_id", "length", "state", "pinned")
    return all(a[k] == b[k] for k in keys) and a["state"] == "ready" and a["pinned"]


def totals(s: dict[str, Any]) -> Counter[str]:
    """Engine counters summed over the live replicas, plus hits per prefix id
    (``prefix:<id>``) and registrations."""
    out: Counter[str] = Counter()
    for rep in s["replicas"].values():
        out.update(counters(rep))
        out["registrations"] += rep["granikv"]["events"]["registrations"]
        for pid, rec in rep["prefix_hits"].items():
            out[f"prefix:{pid}"] += rec["hits"]
    return out


def settled(url: str) -> Counter[str]:
    """Totals from replica reports made after now (requests that ended are counted)."""
    return totals(fresh_stats(url, stats(url)))


def delta(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def wait_run(c: httpx.Client, team: str, run_id: str, timeout_s: float = 240) -> dict[str, Any]:
    """The run's view once it stopped running (answers while the service restarts are
    retried)."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = c.get(f"/teams/{team}/runs/{run_id}")
        if r.status_code == 200 and r.json()["status"] != "running":
            return r.json()  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still running after {timeout_s} s: {r.text}")
        time.sleep(0.25)


class FaultyBackend:
    """A real backend with injected faults, counting per agent what reached it.

    - ``fail_once``: the agent's first attempt raises a TransientLLMError (the graph's
      retry policy retries it);
    - ``fail``: the agent's attempts wait until ``after`` other calls succeeded, then
      raise a final LLMCallError (the run fails mid-fan-out, after those turns finished).
    The faults are raised before the platform is called: ``calls`` counts the agent
    turns the platform served, ``attempts`` every try.
    """

    def __init__(self, inner: TeamBackend, *, fail_once: frozenset[str] = frozenset(),
                 fail: frozenset[str] = frozenset(), after: int = 0) -> None:
        self.inner = inner
        self.team = inner.team
        self.fail_once, self.fail, self.after = fail_once, fail, after
        self.calls: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self._served = asyncio.Event() if after else None

    async def pin_context(self, text: str) -> ContextPin:
        return await self.inner.pin_context(text)

    async def read_context(self) -> ContextPin | None:
        return await self.inner.read_context()

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        self.attempts[request.agent] += 1
        if request.agent in self.fail_once and self.attempts[request.agent] == 1:
            raise TransientLLMError(503, f"injected: {request.agent}'s replica restarts")
        if request.agent in self.fail:
            if self._served is not None:
                await asyncio.wait_for(self._served.wait(), 120)
            raise LLMCallError(400, f"injected: {request.agent} fails")
        reply = await self.inner.chat(request, context)
        self.calls[request.agent] += 1
        if self._served is not None and sum(self.calls.values()) >= self.after:
            self._served.set()
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()

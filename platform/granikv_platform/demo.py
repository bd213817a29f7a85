"""The `make run` walkthrough: a team context, its agents' requests, the GraniKV stats.

Talks to a running app over HTTP only, the way an agent developer would: the prefix API
with httpx, the agents through the OpenAI SDK at the team's own root
``{url}/teams/{team}/v1`` (what ``ChatOpenAI(base_url=...)`` uses).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

AGENTS = {
    "isolation": "Review rule 1: can a team reach another team's prefix? Findings only.",
    "capacity": "Review rule 2: what happens when a prefix does not fit? Findings only.",
    "errors": "Review rule 3: are the error messages clear? Findings only.",
    "metrics": "Review rule 4: which metric is missing? Findings only.",
    "synthesis": "Propose the three most important changes, most important first.",
}


@dataclass
class DemoReport:
    context: dict[str, Any]
    answers: dict[str, str]
    stats: dict[str, Any]
    lines: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """Summed over replicas: hits, hit tokens, bind errors, bound requests."""
        out = {"hits": 0, "hit_tokens": 0, "bind_errors": 0, "bound_requests": 0}
        for rep in self.stats.get("replicas", {}).values():
            g = rep.get("granikv", {})
            out["hits"] += g.get("hits", {}).get("hits", 0)
            out["hit_tokens"] += g.get("hits", {}).get("hit_tokens", 0)
            out["bind_errors"] += g.get("events", {}).get("bind_errors", 0)
            out["bound_requests"] += g.get("events", {}).get("bound_requests", 0)
        return out


def run_demo(url: str, team: str, context_file: Path, max_tokens: int = 32,
             echo: Callable[[str], None] = print) -> DemoReport:
    http = httpx.Client(base_url=url, timeout=300)
    before = _hits(http.get("/v1/granikv/stats").json())
    ctx = http.put(f"/teams/{team}/context", json={"text": context_file.read_text()})
    ctx.raise_for_status()
    c = ctx.json()
    echo(f"team {team!r}: context {c['prefix_id']} ({c['length']} tokens) is "
         f"{c['state'].upper()} at HOT slot {c['hot_start']}, pinned={c['pinned']}")
    agents = OpenAI(base_url=f"{url}/teams/{team}/v1", api_key="unused")
    model = agents.models.list().data[0].id

    def ask(seed: int, task: str) -> str:
        # Sampled with a seed per agent: the random tiny model's greedy answer barely
        # depends on a short question after a long shared context.
        r = agents.chat.completions.create(model=model, max_tokens=max_tokens, seed=seed,
                                           temperature=1.0,
                                           messages=[{"role": "user", "content": task}])
        return r.choices[0].message.content or ""

    with ThreadPoolExecutor(len(AGENTS)) as pool:
        answers = dict(zip(AGENTS, pool.map(ask, range(len(AGENTS)), AGENTS.values())))
    for name, text in answers.items():
        echo(f"  [{name}] {text!r}")
    stats = _wait_for_hits(http, before + len(AGENTS))
    report = DemoReport(c, answers, stats)
    for line in format_stats(stats):
        echo(line)
    return report


def _hits(stats: dict[str, Any]) -> int:
    return sum(r.get("granikv", {}).get("hits", {}).get("hits", 0)
               for r in stats.get("replicas", {}).values())


def _wait_for_hits(http: httpx.Client, want: int, timeout_s: float = 15.0) -> dict[str, Any]:
    """Replicas report every sync period: wait for reports made after our requests ended
    (newer than the ones seen now) that count them."""
    deadline = time.monotonic() + timeout_s
    seen = _report_times(http.get("/v1/granikv/stats").json())
    while True:
        stats: dict[str, Any] = http.get("/v1/granikv/stats").json()
        times = _report_times(stats)
        fresh = all(t > seen.get(r, 0.0) for r, t in times.items())
        if (fresh and _hits(stats) >= want) or time.monotonic() > deadline:
            return stats
        time.sleep(0.25)


def _report_times(stats: dict[str, Any]) -> dict[str, float]:
    return {r: float(s.get("reported_at", 0.0)) for r, s in stats.get("replicas", {}).items()}


def format_stats(stats: dict[str, Any]) -> list[str]:
    lines = ["GraniKV statistics:"]
    for rid, r in sorted(stats.get("replicas", {}).items()):
        g, fe = r.get("granikv", {}), r.get("frontend", {})
        hot, cold, hits = g.get("hot", {}), g.get("cold", {}), g.get("hits", {})
        ev, d = g.get("events", {}), g.get("dispatch", {})
        lines += [
            f"  replica {rid}:",
            f"    HOT  {hot.get('used', 0)}/{hot.get('capacity', 0)} slots used, "
            f"{hot.get('pinned', 0)} pinned, {r.get('pinned_prefixes', 0)} pinned prefixes",
            f"    COLD {cold.get('used', 0)}/{cold.get('capacity', 0)} slots used",
            f"    hits {hits.get('hits', 0)} ({hits.get('hit_tokens', 0)} tokens from HOT), "
            f"cold fallbacks {hits.get('cold_fallbacks', 0)}, "
            f"bind errors {ev.get('bind_errors', 0)}",
            f"    dispatcher: {d.get('steps', 0)} steps, groups {d.get('groups', {})}, "
            f"regimes {d.get('regimes', {})}",
            f"    {fe.get('generation_tokens', 0)} tokens generated, "
            f"{fe.get('generation_tokens_per_s', 0.0):.1f} tokens/s, queue running "
            f"{fe.get('running', 0)} waiting {fe.get('waiting', 0)}",
        ]
    return lines

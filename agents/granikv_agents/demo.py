"""The `make run` walkthrough: an agent team's run, its answers, the GraniKV stats.

Talks to a running app over HTTP only, the way an agent developer would: it starts a run
of a team spec (``POST /teams/{team}/runs``, the agents layer mounted on the app), prints
its events as they stream (``GET .../events``: the team context pinned as a HOT prefix,
then each agent's turn), then the replicas' statistics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class DemoReport:
    run: dict[str, Any]
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


def run_demo(url: str, spec: dict[str, Any], max_tokens: int | None = None,
             echo: Callable[[str], None] = print, api_key: str | None = None,
             admin_key: str | None = None) -> DemoReport:
    """Run the team ``spec`` (a TeamSpec as JSON, context inline) through REST, with
    the team's API key (and the operator's for the statistics)."""
    team = spec["team"]
    http = httpx.Client(base_url=url, headers=_auth(api_key, team), timeout=300)
    ops = httpx.Client(base_url=url, headers=_auth(admin_key), timeout=60)
    try:
        return _run(http, ops, spec, max_tokens, echo)
    finally:
        http.close()
        ops.close()


def _auth(key: str | None, team: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return {**headers, "X-GraniKV-Team": team} if team else headers


def _run(http: httpx.Client, ops: httpx.Client, spec: dict[str, Any], max_tokens: int | None,
         echo: Callable[[str], None]) -> DemoReport:
    team = spec["team"]
    before = _hits(_stats(ops))
    body = cap_tokens(spec, max_tokens) if max_tokens else spec
    start = http.post(f"/teams/{team}/runs", json={"spec": body})
    if start.status_code != 201:
        raise RuntimeError(f"POST /teams/{team}/runs: {start.status_code} {start.text}")
    run_id = start.json()["run_id"]
    echo(f"team {team!r}: run {run_id} of {len(spec['agents'])} agents "
         f"({spec['workflow']['shape']})")
    context: dict[str, Any] = {}
    answers: dict[str, str] = {}
    for kind, ev in _events(http, f"/teams/{team}/runs/{run_id}/events"):
        if kind == "context" and ev["when"] == "start":
            context = ev
            echo(f"team {team!r}: context {ev['prefix_id']} ({ev['length']} tokens) is "
                 f"{ev['state'].upper()} at HOT slot {ev['hot_start']}, pinned="
                 f"{ev['pinned']} ({'reused' if ev['reused'] else 'registered'})")
        elif kind == "turn":
            answers[ev["agent"]] = ev["text"]
            echo(f"  [{ev['agent']}] {ev['text']!r}")
    run = http.get(f"/teams/{team}/runs/{run_id}").json()
    echo(f"run {run_id} {run['status']}{': ' + run['error'] if run['error'] else ''}, "
         f"{len(run['turns'])} agent turns")
    stats = _wait_for_hits(ops, before + len(run["turns"]))
    report = DemoReport(run, context, answers, stats)
    for line in format_stats(stats):
        echo(line)
    return report


def cap_tokens(spec: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``spec`` with every agent's turn capped at ``max_tokens`` (a quicker demo)."""
    def cap(s: dict[str, Any] | None) -> dict[str, Any]:
        s = dict(s or {})
        s["max_tokens"] = min(s.get("max_tokens") or max_tokens, max_tokens)
        return s

    return {**spec, "sampling": cap(spec.get("sampling")),
            "limits": {**spec.get("limits", {}), "max_tokens": max_tokens},
            "agents": [{**a, "sampling": cap(a.get("sampling"))} for a in spec["agents"]]}


def _events(http: httpx.Client, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) of a server-sent event stream, until it ends."""
    kind = "message"
    with http.stream("GET", path) as s:
        s.raise_for_status()
        for line in s.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                yield kind, json.loads(line[len("data: "):])


def _stats(http: httpx.Client) -> dict[str, Any]:
    r = http.get("/v1/granikv/stats")
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def _hits(stats: dict[str, Any]) -> int:
    return sum(r.get("granikv", {}).get("hits", {}).get("hits", 0)
               for r in stats.get("replicas", {}).values())


def _wait_for_hits(http: httpx.Client, want: int, timeout_s: float = 15.0) -> dict[str, Any]:
    """Replicas report every sync period: wait for reports made after our requests ended
    (newer than the ones seen now) that count them."""
    deadline = time.monotonic() + timeout_s
    seen = _report_times(_stats(http))
    while True:
        stats = _stats(http)
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
            "    prefix hits: " + (", ".join(
                f"{pid} ({p.get('team')}) {p.get('hits', 0)}"
                for pid, p in sorted(r.get("prefix_hits", {}).items())) or "none"),
            f"    dispatcher: {d.get('steps', 0)} steps, groups {d.get('groups', {})}, "
            f"regimes {d.get('regimes', {})}",
            f"    {fe.get('generation_tokens', 0)} tokens generated, "
            f"{fe.get('generation_tokens_per_s', 0.0):.1f} tokens/s, queue running "
            f"{fe.get('running', 0)} waiting {fe.get('waiting', 0)}",
        ]
    return lines


def quickstart(root: str, model: str, team: str | None, key: str | None) -> list[str]:
    """Copy-paste lines for the first request of a newcomer: curl and the OpenAI SDK on
    the team's OpenAI root (its context first, from HOT)."""
    base = f"{root}/teams/{team}/v1" if team else f"{root}/v1"
    key = key or "<your API key>"
    body = json.dumps({"model": model, "max_tokens": 32,
                       "messages": [{"role": "user", "content": "Say hello."}]})
    return [
        f"model: {model}   OpenAI root: {base}",
        "try it with curl:",
        f"  curl -s {base}/chat/completions -H 'Authorization: Bearer {key}' \\",
        f"    -H 'Content-Type: application/json' -d '{body}'",
        "or from Python (pip install openai):",
        "  from openai import OpenAI",
        f"  client = OpenAI(base_url={base!r}, api_key={key!r})",
        f"  print(client.chat.completions.create(model={model!r}, max_tokens=32, "
        "messages=[{'role': 'user', 'content': 'Say hello.'}]).choices[0].message.content)",
    ]

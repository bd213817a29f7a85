"""One LangGraph agent team run through the platform's REST API, end to end, timed.

    python -m granikv_engine.bench.online_team --base-url URL --team team0 \\
        --api-keys-file KEYS --tokenizer MODEL_DIR --agents 32 --out DIR

A map-reduce team of ``--agents`` reviewers and a synthesizer over one shared context of
``--context-tokens`` tokens (``POST /teams/{team}/runs``), polled until it ends. Writes
``online-team-run.json``: the wall time, the run's status and turns, and the HOT hits
the run added (from ``/v1/granikv/stats``, with the operator's key when given).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx

from granikv_engine.bench.online import text_of, word_pool


def team_spec(team: str, context: str, agents: int, max_tokens: int) -> dict[str, Any]:
    reviewers = [{"name": f"reviewer{i}", "sampling": {"seed": i},
                  "role": f"Review part {i} of the shared document."} for i in range(agents)]
    return {"team": team, "description": "reviewers over one shared document",
            "context": context, "task": "Give your findings in two sentences.",
            "sampling": {"temperature": 1.0, "max_tokens": max_tokens},
            "workflow": {"shape": "map_reduce", "reducer": "synthesizer"},
            "limits": {"rounds": 1, "max_tokens": max_tokens, "concurrency": agents},
            "agents": [*reviewers, {"name": "synthesizer", "role": "Join the findings."}]}


def hot_hits(http: httpx.Client, admin: dict[str, str]) -> int | None:
    r = http.get("/v1/granikv/stats", headers=admin)
    if r.status_code != 200:
        return None
    return sum(rep.get("granikv", {}).get("hits", {}).get("hits", 0)
               for rep in r.json().get("replicas", {}).values())


def run(base_url: str, team: str, key: str, admin_key: str, spec: dict[str, Any],
        timeout_s: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    admin = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
    with httpx.Client(base_url=base_url, timeout=120) as http:
        before = hot_hits(http, admin)
        t0 = time.perf_counter()
        start = http.post(f"/teams/{team}/runs", json={"spec": spec}, headers=headers)
        if start.status_code != 201:
            raise RuntimeError(f"POST /teams/{team}/runs: {start.status_code} {start.text}")
        run_id = start.json()["run_id"]
        while True:
            rec = http.get(f"/teams/{team}/runs/{run_id}", headers=headers).json()
            if rec["status"] != "running" or time.perf_counter() - t0 > timeout_s:
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        time.sleep(3.0)  # the replicas report their counters periodically
        after = hot_hits(http, admin)
    return {"run_id": run_id, "status": rec["status"], "error": rec.get("error"),
            "agents": len(spec["agents"]), "turns": len(rec.get("turns", [])),
            "wall_s": wall, "hot_hits_added": None if before is None or after is None
            else after - before}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--team", default="team0")
    p.add_argument("--api-keys-file", type=Path, required=True)
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument("--agents", type=int, default=32)
    p.add_argument("--context-tokens", type=int, default=16384)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    keys: dict[str, str] = {}
    for line in a.api_keys_file.read_text().splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            who, key = line.split(":", 1)
            keys[who.strip()] = key.strip()
    words = word_pool(a.tokenizer / "tokenizer.json")
    context = text_of(words, a.context_tokens, random.Random(7), f"Team {a.team} document.")
    spec = team_spec(a.team, context, a.agents, a.max_tokens)
    out = run(a.base_url.rstrip("/"), a.team, keys[a.team], keys.get("@admin", ""), spec,
              a.timeout)
    out["command"] = "python -m granikv_engine.bench.online_team " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "online-team-run.json").write_text(json.dumps(out, indent=1))
    print(f"== team run: {out['status']}, {out['turns']} turns of {out['agents']} agents in "
          f"{out['wall_s']:.1f} s, HOT hits +{out['hot_hits_added']}", flush=True)


if __name__ == "__main__":
    main()

"""CPU time per streamed token of each process of a server, for one workload (Linux).

Throughput on a GPU says *whether* a server keeps up with its engine; this says *which
process pays* for each token, and can be measured anywhere the server runs, a CPU
machine included. It runs one closed-loop workload of ``bench/online.py`` against a
running server and reads, before and after, the CPU time (user + system, from
``/proc/PID/stat``) of every process whose command line matches one of the named
patterns (a Ray actor's process title, ``ServeReplica:APP:DEPLOYMENT``, or vLLM's
``EngineCore``), then divides by the tokens streamed; and the same per token without
each process's idle load (measured for ``--idle-s`` seconds first):

    python -m granikv_engine.bench.server_cpu --base-url http://127.0.0.1:8100 \\
        --side platform --api-keys-file KEYS --tokenizer MODEL_DIR --model NAME \\
        --team team0 --context-tokens 1000 --agents 32 --own-tokens 50 --gen-tokens 200 \\
        --proc replica='ServeReplica:.*-llm' --proc engine_core=EngineCore \\
        --proc proxy=ProxyActor --front replica --front proxy --stream-interval 1 \\
        --out FILE.json

A pattern that matches several processes sums them; one that matches none is an error
(a misnamed process would otherwise read as free). ``--front NAME`` marks a group as
part of the server's front end (HTTP, OpenAI serving, streaming: what ``vllm serve``'s
API server does), whose per-token sum the report compares across servers; the side and
``--stream-interval`` are recorded with the figures. The numbers are CPU seconds on the
machine that ran them: compare settings on one machine, not machines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from granikv_engine.bench import online

TICK = os.sysconf("SC_CLK_TCK")


def processes(pattern: str) -> list[int]:
    """PIDs whose command line (NUL-separated, as a title or argv) matches ``pattern``."""
    rx = re.compile(pattern)
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if rx.search(cmd):
            found.append(int(entry.name))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def snapshot(groups: dict[str, list[int]]) -> dict[str, float]:
    return {name: sum(cpu_seconds(p) for p in pids) for name, pids in groups.items()}


def measure(target: online.Target, work: online.Workload, patterns: dict[str, str],
            idle_s: float = 10.0, repeat: int = 1) -> dict[str, Any]:
    """``idle_s``: first measure each process idle that long (background loops, stats
    reports), so the per-token figure can leave that out (``net_ms_per_token``).
    ``repeat``: measured runs of the workload; each process's figures are the median
    run's (its own median), every run's are kept (``runs``)."""
    groups = {name: processes(rx) for name, rx in patterns.items()}
    missing = [f"{name}={patterns[name]}" for name, pids in groups.items() if not pids]
    if missing:
        raise SystemExit(f"no process matches {', '.join(missing)}")
    online.run(target, work, procs=1)  # once unmeasured: contexts set, every path warm
    idle0, t0 = snapshot(groups), time.perf_counter()
    time.sleep(idle_s)
    idle1, idle_wall = snapshot(groups), time.perf_counter() - t0
    idle = {name: (idle1[name] - idle0[name]) / idle_wall for name in groups}
    runs = [_one_run(target, work, groups, idle) for _ in range(max(1, repeat))]
    middle = sorted(runs, key=lambda r: r["output_tok_s"])[len(runs) // 2]
    procs = {}
    for name in groups:
        mid = sorted(runs, key=lambda r: r["net_ms"][name])[len(runs) // 2]
        procs[name] = {"pattern": patterns[name], "pids": groups[name],
                       "cpu_s": round(mid["used"][name], 3),
                       "cpu_ms_per_token": round(mid["ms"][name], 4),
                       "busy_of_wall": round(mid["used"][name] / mid["wall"], 3),
                       "idle_busy": round(idle[name], 4),
                       "net_ms_per_token": round(mid["net_ms"][name], 4),
                       "net_ms_per_token_runs": [round(r["net_ms"][name], 4) for r in runs]}
    return {
        "workload": {"contexts": {t: len(c.split()) for t, c in work.contexts.items()},
                     "requests": len(work.turns),
                     "gen_tokens": sorted({t.gen_tokens for t in work.turns})},
        "processes": procs, "repeat": len(runs),
        "output_tokens": middle["tokens"], "wall_s": round(middle["wall"], 3),
        "summary": middle["summary"],
        "output_tok_s_runs": [round(r["output_tok_s"], 1) for r in runs],
    }


def _one_run(target: online.Target, work: online.Workload, groups: dict[str, list[int]],
             idle: dict[str, float]) -> dict[str, Any]:
    before, t0 = snapshot(groups), time.perf_counter()
    out = online.run(target, work, procs=1)  # (sets the same contexts again: a few ms)
    after, wall = snapshot(groups), time.perf_counter() - t0
    tokens = max(int(out["summary"]["output_tokens"]), 1)
    used = {name: after[name] - before[name] for name in groups}
    net = {name: max(0.0, used[name] - idle[name] * wall) for name in groups}
    return {"tokens": tokens, "wall": wall, "summary": out["summary"], "used": used,
            "output_tok_s": float(out["summary"]["output_tok_s"]),
            "ms": {n: 1e3 * used[n] / tokens for n in groups},
            "net_ms": {n: 1e3 * net[n] / tokens for n in groups}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--side", choices=online.SIDES, required=True)
    p.add_argument("--tokenizer", type=Path, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--api-keys-file", type=Path)
    p.add_argument("--team", default="team0")
    p.add_argument("--context-tokens", type=int, default=1000)
    p.add_argument("--agents", type=int, default=32)
    p.add_argument("--own-tokens", type=int, default=50)
    p.add_argument("--gen-tokens", type=int, default=200)
    p.add_argument("--proc", action="append", default=[], metavar="NAME=REGEX",
                   help="a process group to measure (repeatable)")
    p.add_argument("--idle-s", type=float, default=10.0,
                   help="measure the processes idle this long first")
    p.add_argument("--front", action="append", default=[], metavar="NAME",
                   help="a --proc group that is part of the server's front end (repeatable)")
    p.add_argument("--stream-interval", type=int, default=None,
                   help="the server's stream_interval (recorded)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measured runs; each process's figures are its median run's")
    p.add_argument("--label", default="")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    patterns = dict(x.split("=", 1) for x in a.proc)
    if not patterns:
        p.error("name at least one --proc NAME=REGEX")
    unknown = sorted(set(a.front) - set(patterns))
    if unknown:
        p.error(f"--front {unknown}: not among the --proc names")
    keys = {"": ""} | (online.read_keys(a.api_keys_file) if a.api_keys_file else {})
    words = online.word_pool(a.tokenizer / "tokenizer.json")
    work = online.build("server-cpu", words, context_tokens=[a.context_tokens],
                        agents_per_team=a.agents, own_tokens=a.own_tokens,
                        gen_tokens=a.gen_tokens, teams=[a.team])
    target = online.Target(a.base_url.rstrip("/"), a.side, a.model, keys)
    result = measure(target, work, patterns, a.idle_s, a.repeat)
    result.update(label=a.label, side=a.side, front=a.front,
                  stream_interval=a.stream_interval)
    result["front_net_ms_per_token"] = round(sum(
        result["processes"][n]["net_ms_per_token"] for n in a.front), 4)
    result["command"] = "python -m granikv_engine.bench.server_cpu " + " ".join(
        argv if argv is not None else sys.argv[1:])
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    s = result["summary"]
    print(f"== {a.label or a.side}: {result['output_tokens']} tokens, "
          f"{s['output_tok_s']:.0f} tok/s, errors {s['errors']}; front end "
          f"{result['front_net_ms_per_token']} ms CPU a token")
    for name, r in result["processes"].items():
        print(f"   {name}: {r['cpu_ms_per_token']} ms CPU a token, "
              f"{r['net_ms_per_token']} without its idle load ({r['busy_of_wall']:.0%} of "
              f"one core, idle {r['idle_busy']:.0%}; {len(r['pids'])} process(es))")


if __name__ == "__main__":
    main()

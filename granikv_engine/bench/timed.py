"""One engine, workloads timed one after another: each result as a dict for the JSON.

``run_workloads`` is e2e.py's loop: GraniKV with ``attributed`` workloads runs each once
with the unified paged backend only (engine ``granikv-paged``) and once with the
dispatcher; stock with ``capped`` workloads runs each once as is and once with every team
context cut to ``NO_CONTEXT`` tokens (engine ``stock-noctx``), whose wall time plus the
priced prefix work (bench/ceiling.py) is the workload's ceiling, written into its result.
GraniKV runs the workloads at the positions in ``unregistered`` as stock's are sent: no
registration, no request arguments (engine ``ENGINE-unreg``, ``"registered": false``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Collection, Iterator
from typing import Any

from granikv_engine.bench.ceiling import Rates, Work, ceiling, prefix_work, shape_of
from granikv_engine.bench.workloads import (
    MAX_NUM_SEQS,
    Request,
    Workload,
    next_histories,
    prefixes,
    requests,
    scaled,
)

NO_CONTEXT = 16  # the ceiling's run: every team context cut to this many tokens


def run_workloads(llm: Any, engine: str, ws: list[Workload], vocab: int, scale: float,
                  attributed: Collection[str] = (), capped: Collection[str] = (),
                  max_num_seqs: int = MAX_NUM_SEQS, unregistered: Collection[int] = ()
                  ) -> Iterator[dict[str, Any]]:
    """Each workload's results, in order, as they are measured."""
    for pos, w in enumerate(ws):
        if engine.startswith("granikv") and pos in unregistered:
            r = run_workload(llm, f"{engine}-unreg", w, vocab, scale, salt="-unreg",
                             slots=max_num_seqs, registered=False)
            r["max_num_seqs"] = max_num_seqs
            yield r
            continue
        modes: list[str | None] = [None]
        if engine == "granikv" and w.name in attributed:
            modes = ["paged", "auto"]
        elif engine == "stock" and w.name in capped:
            modes = [None, "noctx"]
        for i, mode in enumerate(modes):
            name = {"paged": "granikv-paged", "noctx": "stock-noctx"}.get(mode or "", engine)
            if mode in ("paged", "auto"):
                llm.collective_rpc("granikv_set_backend", args=(mode,))
            r = run_workload(llm, name, w, vocab, scale, salt=f"-run{i}",
                             context=NO_CONTEXT if mode == "noctx" else None,
                             slots=max_num_seqs)
            r["max_num_seqs"] = max_num_seqs
            yield r


def _params(n: int, extra: dict[str, Any] | None) -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0,
                          detokenize=False, extra_args=extra)


def _pct(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
    return {"p50": q[49], "p90": q[89], "p99": q[98], "mean": statistics.fmean(xs)}


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """a - b for nested counters."""
    out: dict[str, Any] = {}
    for k, v in a.items():
        if isinstance(v, dict):
            out[k] = {kk: vv - b.get(k, {}).get(kk, 0) for kk, vv in v.items()}
        elif isinstance(v, int | float):
            out[k] = v - b.get(k, 0)
    return out


def run_workload(llm: Any, engine: str, w: Workload, vocab: int, scale: float,
                 salt: str = "", context: int | None = None,
                 slots: int = MAX_NUM_SEQS, registered: bool = True) -> dict[str, Any]:
    """One workload, timed (turn by turn if it has several). ``context`` cuts every team
    context to that many tokens (the ceiling's run, engine ``stock-noctx``); ``slots``
    (max_num_seqs) schedules the priced prefix work (bench/ceiling.py); ``registered``
    False: GraniKV gets the requests as stock does (nothing registered, no arguments)."""
    from granikv_engine.vllm_plugin.client import control

    granikv = engine.startswith("granikv")
    gk = granikv and registered  # contexts registered, requests bound
    pid = w.name.replace("W2", "W1")  # W2 reuses W1's team and prefix
    t0 = time.perf_counter()
    _load_contexts(llm, gk, pid, prefixes(w, vocab, scale, context))
    warm_s = time.perf_counter() - t0
    # Both engines alike: a few agents' requests, untimed, through the same kernels as
    # the timed run (prefill and decode), so no kernel compiles inside the timing.
    _generate(llm, requests(w, vocab, scale, salt + "-warmup", context)[:8], gk, pid, 4)
    control(llm, "reset_peaks")
    before = control(llm, "stats")
    shape = shape_of(llm.llm_engine.vllm_config.model_config.hf_config)
    contexts = [scaled(n, scale) for n in w.prefix_lens]
    turns, histories = [], None
    for k in range(w.turns):
        reqs = requests(w, vocab, scale, salt, context, k, histories)
        t0 = time.perf_counter()
        outs = _generate(llm, reqs, gk, pid)
        turn = _summary(outs, time.perf_counter() - t0)
        work = prefix_work(shape, Rates(), contexts,
                           [(r.team, r.fresh, r.output) for r in reqs], min(slots, len(reqs)))
        turn["priced"] = work._asdict()
        if context:
            turn["ceiling"] = ceiling(turn["wall_s"], turn["output_tokens"], work)
        turns.append(turn)
        histories = next_histories(reqs, [o.outputs[0].token_ids for o in outs])
    after = control(llm, "stats")
    if gk:  # leave the HOT arena as found: the next workload pins its own contexts
        _release_contexts(llm, pid, len(w.prefix_lens))
    res = {"engine": engine, "workload": w.name, "agents": w.agents, "prefix_lens":
           contexts, "context_cut": context, "warm_s": warm_s, **_total(turns),
           "scheduler": after.get("scheduler"), "stats_after": after,
           "registered": gk or not granikv}
    if w.turns > 1:
        res["turns"] = turns
    if granikv:
        res["hits"] = after["hits"]["hits"] - before["hits"]["hits"]
        res["hit_counters"] = _delta(after["hits"], before["hits"])
        res["dispatch"] = _delta(after.get("dispatch", {}), before.get("dispatch", {}))
    return res


def _load_contexts(llm: Any, gk: bool, pid: str, contexts: list[list[int]]) -> None:
    """Stock: each team context into the prefix cache; GraniKV: registered (pinned)."""
    from vllm.inputs import TokensPrompt

    from granikv_engine.vllm_plugin.client import register

    for t, p in enumerate(contexts):
        if gk:
            register(llm, f"{pid}-t{t}", p, prefix_id=f"{pid}-t{t}")
        else:
            llm.generate([TokensPrompt(prompt_token_ids=p)], _params(1, None), use_tqdm=False)


def _release_contexts(llm: Any, pid: str, teams: int, limit_s: float = 30.0) -> None:
    """Unregister the contexts and wait until their HOT slots are free (a slot still
    referenced is freed when its last request lets go)."""
    from granikv_engine.vllm_plugin.client import control

    for t in range(teams):
        control(llm, "unregister", prefix_id=f"{pid}-t{t}", team=f"{pid}-t{t}")
    t0 = time.perf_counter()
    while control(llm, "stats")["hot"]["used"] and time.perf_counter() - t0 < limit_s:
        time.sleep(0.1)


def _generate(llm: Any, reqs: list[Request], gk: bool, pid: str,
              tokens: int | None = None) -> list[Any]:
    """All requests at once; each generates its own count (or ``tokens``)."""
    from vllm.inputs import TokensPrompt

    from granikv_engine.vllm_plugin.client import bind_args

    sps = [_params(tokens or r.output, bind_args(f"{pid}-t{r.team}", f"{pid}-t{r.team}")
                   if gk else None) for r in reqs]
    return list(llm.generate([TokensPrompt(prompt_token_ids=r.prompt) for r in reqs], sps,
                             use_tqdm=False))


def _summary(outs: list[Any], wall: float) -> dict[str, Any]:
    """Output tokens, wall time, tok/s and latencies of one timed generate call."""
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    ttft = [o.metrics.first_token_latency for o in outs if o.metrics]
    itl = [(o.metrics.last_token_ts - o.metrics.first_token_ts) / max(1, len(
        o.outputs[0].token_ids) - 1) for o in outs if o.metrics]
    return {"output_tokens": n_out, "wall_s": wall, "tok_s": n_out / wall,
            "ttft_s": _pct(ttft), "itl_s": _pct(itl), "_ttft": ttft, "_itl": itl}


def _total(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """All turns together (the only one, for single-turn workloads); the raw latencies
    go."""
    n = sum(t["output_tokens"] for t in turns)
    wall = sum(t["wall_s"] for t in turns)
    ttft = [x for t in turns for x in t.pop("_ttft")]
    itl = [x for t in turns for x in t.pop("_itl")]
    out = {"output_tokens": n, "wall_s": wall, "tok_s": n / wall, "ttft_s": _pct(ttft),
           "itl_s": _pct(itl), "priced": {k: sum(t["priced"][k] for t in turns)
                                          for k in turns[0]["priced"]}}
    if "ceiling" in turns[0]:
        out["ceiling"] = ceiling(wall, n, Work(**out["priced"]))
    return out



"""Online load generator: agent teams against any OpenAI-compatible base URL.

    python -m granikv_engine.bench.online --base-url http://127.0.0.1:8000 \\
        --side stock --workload W1-online --tokenizer MODEL_DIR --model NAME --out DIR

Each request is one agent's turn: its team's shared context, then the agent's own
message, then ``--gen-tokens`` generated tokens (``min_tokens`` = ``max_tokens``,
``ignore_eos``), streamed. What differs by side is only where the context lives:
- ``stock``: the context is the system message of every request (what a user of plain
  vLLM sends; vLLM's prefix cache may share it);
- ``granikv``: the same requests, bound with ``vllm_xargs`` to the team's prefix, which
  is registered first (GraniKV inside ``vllm serve``);
- ``platform``: the GraniKV platform's team route, ``/teams/{team}/v1``: the context is
  set once with ``PUT /teams/{team}/context`` and the requests carry only the agent's
  message.
Closed loop sends every request at once; open loop sends them at Poisson arrivals of
``--rate`` requests/s. The requests are spread over ``--procs`` client processes, so
the client is not what limits the server. Results: output tokens/s, TTFT, TPOT and
inter-chunk latency percentiles, errors, written as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

SIDES = ("stock", "granikv", "platform")


@dataclass(frozen=True)
class Turn:
    """One agent's request: ``team``'s context, then ``own`` (about ``own_tokens``)."""

    index: int
    team: str
    own: str
    gen_tokens: int


@dataclass(frozen=True)
class Workload:
    name: str
    contexts: dict[str, str]  # team -> its shared context (about its token count)
    turns: tuple[Turn, ...]


@dataclass
class Result:
    """What the client saw of one request (times in seconds from the run's start)."""

    index: int
    team: str
    sent: float
    first: float | None = None
    done: float | None = None
    chunks: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    streamed_tokens: int = 0  # token ids seen in the stream (counts a request cut short)
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    error: str | None = None


# ---- workloads ------------------------------------------------------------------------
def word_pool(tokenizer_file: Path) -> list[str]:
    """Words that the tokenizer encodes as one token after a space: a text of N of them,
    space-separated, is about N tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    words = []
    for piece in tok.get_vocab():
        word = piece[1:] if piece.startswith("Ġ") else None  # byte-level BPE's space
        one = word and word.isalpha() and word.isascii() and len(word) > 2 and (
            tok.encode(" " + word, add_special_tokens=False).ids == [tok.token_to_id(piece)])
        if one:
            words.append(str(word))
    if len(words) < 50:
        raise ValueError(f"{tokenizer_file}: too few one-token words ({len(words)}) to "
                         "build prompts from")
    return sorted(words)


def word_ids(tokenizer_file: Path) -> tuple[int, ...]:
    """The ids of ``word_pool``'s words (with their leading space): each decodes to a
    whole word on its own, whatever comes before or after it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    ids = [tok.token_to_id("Ġ" + w) for w in word_pool(tokenizer_file)]
    return tuple(i for i in ids if i is not None)  # every one is there (word_pool)


def text_of(words: list[str], n: int, rng: random.Random, tag: str) -> str:
    return tag + " " + " ".join(rng.choice(words) for _ in range(max(1, n - 2)))


def build(name: str, words: list[str], *, context_tokens: list[int], agents_per_team: int,
          own_tokens: int, gen_tokens: int, seed: int = 0,
          teams: list[str] | None = None, salt: str = "") -> Workload:
    """Teams with the given context lengths, ``agents_per_team`` turns each, shuffled.
    ``teams`` names them (default team0, team1, ...). ``salt`` draws other agent
    messages for the same contexts (a later run on the same server then finds none of
    an earlier run's messages in its prefix cache)."""
    rng = random.Random(seed)
    names = teams or [f"team{k}" for k in range(len(context_tokens))]
    if len(names) < len(context_tokens):
        raise ValueError(f"{name} needs {len(context_tokens)} teams, got {names}")
    contexts = {names[k]: text_of(words, n, rng, f"Team {k} context.")
                for k, n in enumerate(context_tokens)}
    if salt:
        rng = random.Random(f"{seed}-{salt}")
    turns = [Turn(0, team, text_of(words, own_tokens, rng, f"Agent {team}-{a}:"), gen_tokens)
             for team in contexts for a in range(agents_per_team)]
    rng.shuffle(turns)
    return Workload(name, contexts, tuple(Turn(i, t.team, t.own, t.gen_tokens)
                                          for i, t in enumerate(turns)))


def standard(name: str, words: list[str], scale: float = 1.0,
             teams: list[str] | None = None, salt: str = "") -> Workload:
    """W1-online: one team, a 16K-token context, 256 agents, 512 own and 256 generated
    tokens each. W3-online: 8 teams with 2K, 4K .. 16K-token contexts, 32 agents each.
    ``scale`` shrinks every count (a CPU smoke run)."""
    def s(n: int) -> int:
        return max(2, int(n * scale))

    if name == "W1-online":
        return build(name, words, context_tokens=[s(16384)], agents_per_team=s(256),
                     own_tokens=s(512), gen_tokens=s(256), teams=teams, salt=salt)
    if name == "W3-online":
        return build(name, words, context_tokens=[s(2048 * (k + 1)) for k in range(8)],
                     agents_per_team=s(32), own_tokens=s(512), gen_tokens=s(256), teams=teams,
                     salt=salt)
    raise ValueError(f"unknown workload {name!r} (W1-online, W3-online)")


# ---- sides ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    base_url: str
    side: str
    model: str
    api_keys: dict[str, str]  # team -> key (platform); "" -> a key for every call
    # Generate only these token ids (vLLM's allowed_token_ids), or any when None. A dummy
    # model (random weights, greedy) tends to repeat one id; when that id decodes to no
    # complete text on its own (a special token, a lone UTF-8 byte, or an id beyond the
    # tokenizer's vocabulary), vLLM's incremental detokenizer decodes the whole prompt
    # again for every token (1.75 ms a token at a 16K-token prompt on a 2-core x86 CPU,
    # against 0.014 ms for a whole word), and the server, not the engine, becomes the
    # bottleneck. ``word_ids`` gives ids that each decode to a whole word.
    allowed_token_ids: tuple[int, ...] | None = None

    def headers(self, team: str) -> dict[str, str]:
        key = self.api_keys.get(team) or self.api_keys.get("")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def prefix_id(self, team: str) -> str:
        return f"{team}-context"

    def request(self, turn: Turn, contexts: dict[str, str]) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": turn.gen_tokens, "min_tokens": turn.gen_tokens,
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True}
        if self.allowed_token_ids:
            body["allowed_token_ids"] = list(self.allowed_token_ids)
        user = {"role": "user", "content": turn.own}
        if self.side == "platform":
            body["messages"] = [user]
            return f"{self.base_url}/teams/{turn.team}/v1/chat/completions", body
        body["messages"] = [{"role": "system", "content": contexts[turn.team]}, user]
        if self.side == "granikv":
            body["vllm_xargs"] = {"granikv_team": turn.team,
                                  "granikv_prefix_id": self.prefix_id(turn.team)}
        return f"{self.base_url}/v1/chat/completions", body


async def prepare(target: Target, workload: Workload, client: httpx.AsyncClient) -> None:
    """Put each team's context where the side keeps it, then warm every team once."""
    for team, text in workload.contexts.items():
        if target.side == "platform":
            r = await client.put(f"{target.base_url}/teams/{team}/context",
                                 json={"text": text}, headers=target.headers(team))
            _check(r, f"PUT /teams/{team}/context")
        elif target.side == "granikv":
            r = await client.post(f"{target.base_url}/tokenize", json={
                "model": target.model, "add_generation_prompt": False,
                "messages": [{"role": "system", "content": text}]})
            _check(r, "POST /tokenize")
            r = await client.post(f"{target.base_url}/v1/completions", json={
                "model": target.model, "prompt": r.json()["tokens"], "max_tokens": 1,
                "vllm_xargs": {"granikv_team": team, "granikv_prefix_id": target.prefix_id(team),
                               "granikv_register": 1}})
            _check(r, "register the context")
    warm = [Turn(-1, team, f"warm-up of {team}", 4) for team in workload.contexts]
    for turn in warm:
        res = await one(target, turn, workload.contexts, client, time.perf_counter())
        if res.error:
            raise RuntimeError(f"warm-up of {turn.team} failed: {res.error}")


def _check(r: httpx.Response, what: str) -> None:
    if r.status_code >= 300:
        raise RuntimeError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")


async def one(target: Target, turn: Turn, contexts: dict[str, str],
              client: httpx.AsyncClient, t0: float, res: Result | None = None) -> Result:
    """Send ``turn`` and fill ``res`` (a new one if None) as the stream arrives, so that
    a request cancelled at the time limit keeps what it saw."""
    url, body = target.request(turn, contexts)
    res = res or Result(turn.index, turn.team, 0.0)
    res.sent = time.perf_counter() - t0
    try:
        async with client.stream("POST", url, json=body, headers=target.headers(turn.team)) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.perf_counter() - t0
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    res.error = str(chunk["error"])[:200]
                    break
                if chunk.get("usage"):
                    u = chunk["usage"]
                    res.completion_tokens = int(u.get("completion_tokens") or 0)
                    res.prompt_tokens = int(u.get("prompt_tokens") or 0)
                    res.cached_tokens = (u.get("prompt_tokens_details") or {}).get(
                        "cached_tokens")
                for choice in chunk.get("choices") or ():
                    if choice.get("token_ids") or choice.get("delta", {}).get("content"):
                        res.streamed_tokens += len(choice.get("token_ids") or ()) or 1
                        res.chunks.append(now)
                        if res.first is None:
                            res.first = now
    except httpx.HTTPError as e:
        res.error = f"{type(e).__name__}: {e}"
    res.done = time.perf_counter() - t0
    if res.error is None and res.completion_tokens != turn.gen_tokens:
        res.error = f"got {res.completion_tokens} tokens, expected {turn.gen_tokens}"
    return res


# ---- running ----------------------------------------------------------------------------
def arrivals(n: int, rate: float | None, seed: int) -> list[float]:
    """Send offsets: all at 0 (closed loop), or a Poisson process of ``rate`` per s."""
    if not rate:
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


async def _drive(target: Target, workload: Workload, turns: list[Turn], offsets: list[float],
                 start_at: float, time_limit: float | None = None) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    results = [Result(t.index, t.team, o) for t, o in zip(turns, offsets)]
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600.0), limits=limits) as client:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        t0 = time.perf_counter() - (time.time() - start_at)

        async def later(turn: Turn, offset: float, res: Result) -> Result:
            await asyncio.sleep(max(0.0, offset - (time.perf_counter() - t0)))
            return await one(target, turn, workload.contexts, client, t0, res)

        tasks = [asyncio.create_task(later(t, o, r))
                 for t, o, r in zip(turns, offsets, results)]
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
        _, pending = await asyncio.wait(tasks, timeout=left)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for res in results:
            if res.done is None and res.error is None:  # cancelled at the time limit
                res.error = CUT
                res.done = time.perf_counter() - t0
    return [asdict(r) for r in results]


CUT = "cut at the time limit"


def _proc(args: tuple[Target, Workload, list[Turn], list[float], float, float | None]
          ) -> list[dict[str, Any]]:
    return asyncio.run(_drive(*args))


def run(target: Target, workload: Workload, *, rate: float | None = None, procs: int = 4,
        seed: int = 0, time_limit: float | None = None) -> dict[str, Any]:
    """Prepare the side, then send the workload; returns the summary and every result.
    ``time_limit`` (s): cancel what is still running then; the summary then counts the
    tokens streamed by then (``complete`` false)."""
    async def setup() -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0)) as client:
            await prepare(target, workload, client)

    asyncio.run(setup())
    turns = list(workload.turns)
    offsets = arrivals(len(turns), rate, seed)
    procs = max(1, min(procs, len(turns)))
    start_at = time.time() + 1.0 + 0.2 * procs
    jobs = [(target, workload, turns[k::procs], offsets[k::procs], start_at, time_limit)
            for k in range(procs)]
    if procs == 1:
        results = _proc(jobs[0])
    else:
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            results = [r for part in pool.map(_proc, jobs) for r in part]
    results.sort(key=lambda r: r["index"])
    return {"workload": workload.name, "side": target.side, "mode": "open" if rate else "closed",
            "rate": rate, "requests": len(turns), "teams": len(workload.contexts),
            "time_limit_s": time_limit, "summary": summarize(results), "results": results}


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentiles over the requests that finished. Output tokens/s: their completion
    tokens over the run's span; if the time limit cut requests, every token streamed by
    then over the span up to the limit (``complete`` false)."""
    ok = [r for r in results if r["error"] is None]
    cut = [r for r in results if r["error"] == CUT]
    tokens = sum(r["completion_tokens"] for r in ok)
    span = (max(r["done"] for r in ok) - min(r["sent"] for r in results)) if ok else 0.0
    if cut:
        tokens = tokens + sum(r["streamed_tokens"] for r in cut)
        span = max(r["done"] for r in results) - min(r["sent"] for r in results)
    ttft = [r["first"] - r["sent"] for r in ok if r["first"] is not None]
    tpot = [(r["done"] - r["first"]) / (r["completion_tokens"] - 1) for r in ok
            if r["first"] is not None and r["completion_tokens"] > 1]
    itl = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    e2e = [r["done"] - r["sent"] for r in ok]

    def dist(xs: list[float]) -> dict[str, float | None]:
        return {"mean": statistics.fmean(xs) if xs else None, "p50": pct(xs, 50),
                "p90": pct(xs, 90), "p99": pct(xs, 99)}

    cached = [r["cached_tokens"] for r in ok if r["cached_tokens"] is not None]
    return {"ok": len(ok), "errors": len(results) - len(ok) - len(cut), "cut": len(cut),
            "complete": not cut,
            "error_examples": sorted({r["error"] for r in results
                                      if r["error"] and r["error"] != CUT})[:5],
            "output_tokens": tokens, "duration_s": span,
            "output_tok_s": tokens / span if span > 0 else 0.0,
            "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in ok) if ok else 0,
            "cached_tokens_mean": statistics.fmean(cached) if cached else None,
            "ttft_s": dist(ttft), "tpot_s": dist(tpot), "itl_s": dist(itl), "e2e_s": dist(e2e)}


def read_keys(path: Path) -> dict[str, str]:
    """A keys file's ``team: key`` lines (``granikv keys`` writes them)."""
    keys = {}
    for line in path.read_text().splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            who, key = (x.strip() for x in line.split(":", 1))
            keys[who] = key
    return keys


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--side", choices=SIDES, required=True)
    p.add_argument("--workload", action="append", required=True,
                   help="W1-online, W3-online (repeatable)")
    p.add_argument("--tokenizer", type=Path, required=True,
                   help="the served model's folder (its tokenizer.json builds the prompts)")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--api-key", default="", help="one key for every call")
    p.add_argument("--api-keys-file", type=Path, help="'team: key' lines (platform side)")
    p.add_argument("--rate", type=float, default=None, help="open loop: requests/s")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--scale", type=float, default=1.0, help="shrink every count")
    p.add_argument("--teams", default="", help="comma-separated team names (default "
                   "team0, team1, ...)")
    p.add_argument("--words-only", action="store_true",
                   help="generate only token ids that decode to a whole word on their own "
                   "(for dummy weights: see Target.allowed_token_ids)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds: cancel the requests still running then and count the "
                   "tokens streamed so far (the result says it is incomplete)")
    p.add_argument("--stream-interval", type=int, default=None,
                   help="the server's vLLM stream_interval (recorded with the run)")
    p.add_argument("--front", default="", help="the platform's front: proxy (Serve's "
                   "Python proxy) or haproxy (recorded with the run)")
    p.add_argument("--gpu", default="", help="the server's GPU (recorded with the run)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--salt", default="", help="other agent messages, the same contexts "
                   "(a later run on the same server: none of an earlier run's messages cached)")
    p.add_argument("--label", default="", help="recorded with the run and added to its "
                   "file name (runs of one workload and side on one server)")
    a = p.parse_args(argv)
    keys = {"": a.api_key} | (read_keys(a.api_keys_file) if a.api_keys_file else {})
    words = word_pool(a.tokenizer / "tokenizer.json")
    allowed = word_ids(a.tokenizer / "tokenizer.json") if a.words_only else None
    target = Target(a.base_url.rstrip("/"), a.side, a.model, keys, allowed)
    a.out.mkdir(parents=True, exist_ok=True)
    for name in a.workload:
        teams = [t for t in a.teams.split(",") if t] or None
        out = run(target, standard(name, words, a.scale, teams, a.salt), rate=a.rate,
                  procs=a.procs, time_limit=a.time_limit)
        out["command"] = "python -m granikv_engine.bench.online " + " ".join(
            argv if argv is not None else __import__("sys").argv[1:])
        out.update(label=a.label, stream_interval=a.stream_interval, front=a.front,
                   gpu=a.gpu)
        mode = f"open{a.rate:g}" if a.rate else "closed"
        si = f"-si{a.stream_interval}" if a.stream_interval else ""
        front = f"-{a.front}" if a.front else ""
        label = f"-{a.label}" if a.label else ""
        path = a.out / f"online-{name}-{a.side}{front}-{mode}{si}{label}.json"
        path.write_text(json.dumps(out, indent=1))
        s = out["summary"]
        print(f"== {name} {a.side} {mode}: {s['output_tok_s']:.0f} tok/s, "
              f"ttft p50 {s['ttft_s']['p50']}, itl p50 {s['itl_s']['p50']}, "
              f"errors {s['errors']}, cut {s['cut']} "
              f"-> {path}", flush=True)


if __name__ == "__main__":
    main()

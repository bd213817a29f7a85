"""The online load generator, without a GPU server: its time limit (requests still
streaming when it passes are cancelled, keep what they streamed, and the summary says
the run is incomplete; the server here is a slow SSE endpoint, one token every 0.1 s,
so the cut is certain), the whole-word token ids it restricts generation to, and the
salt that draws other agent messages for the same contexts."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from granikv_engine.bench import online

TOKENIZER = Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama"

TOKENS = 40


async def chat(request: Request) -> StreamingResponse:
    body = await request.json()
    fast = "fast" in body["messages"][-1]["content"]

    async def events() -> Iterator[str]:
        n = body["max_tokens"]
        for k in range(n):
            await asyncio.sleep(0.0 if fast else 0.1)
            yield "data: " + json.dumps({"choices": [{"delta": {"content": "x"},
                                                       "token_ids": [k]}]}) + "\n\n"
        yield "data: " + json.dumps({"choices": [], "usage": {
            "completion_tokens": n, "prompt_tokens": 3}}) + "\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def slow_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_time_limit_cuts_the_slow_requests_and_counts_their_tokens(slow_server: str) -> None:
    turns = (online.Turn(0, "t", "fast agent", 5), online.Turn(1, "t", "slow agent", TOKENS),
             online.Turn(2, "t", "slow agent", TOKENS))
    work = online.Workload("W", {"t": "ctx"}, turns)
    target = online.Target(slow_server, "stock", "m", {})
    t = time.perf_counter()
    out = online.run(target, work, procs=1, time_limit=1.5)
    assert time.perf_counter() - t < 1.5 + 3.0 + 4  # warm-up (0.4 s) + start + the limit
    s = out["summary"]
    assert s["ok"] == 1 and s["cut"] == 2 and s["errors"] == 0 and s["complete"] is False
    fast, *slow = out["results"]
    assert fast["error"] is None and fast["completion_tokens"] == 5
    for r in slow:
        assert r["error"] == online.CUT and 5 <= r["streamed_tokens"] < TOKENS, r
        assert r["done"] == pytest.approx(1.5, abs=0.3)
    streamed = 5 + sum(r["streamed_tokens"] for r in slow)
    assert s["output_tokens"] == streamed
    assert s["output_tok_s"] == pytest.approx(streamed / s["duration_s"])
    assert out["time_limit_s"] == 1.5


def test_without_a_limit_every_request_finishes(slow_server: str) -> None:
    turns = (online.Turn(0, "t", "fast agent", 5), online.Turn(1, "t", "slow agent", 8))
    out = online.run(online.Target(slow_server, "stock", "m", {}),
                     online.Workload("W", {"t": "ctx"}, turns), procs=1)
    s = out["summary"]
    assert s["ok"] == 2 and s["cut"] == 0 and s["complete"] is True
    assert s["output_tokens"] == 13


def test_word_ids_decode_to_whole_words_whatever_the_prompt() -> None:
    """A stream of any of them never leaves vLLM's incremental detokenizer waiting for
    more bytes (the slow path that decodes the whole prompt again)."""
    from tokenizers import Tokenizer, decoders

    path = TOKENIZER / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    ids = online.word_ids(path)
    assert len(ids) >= 50 and len(set(ids)) == len(ids)
    prompt = tok.encode("<s><|system|>a context<|end|><|user|>hi<|end|><|assistant|>").ids
    for i in ids:
        text = tok.decode([i])
        assert text.startswith(" ") and text[1:].isalpha(), (i, text)
        stream = decoders.DecodeStream(ids=prompt, skip_special_tokens=True)
        assert stream.step(tok, i) == text and stream.step(tok, i) == text
    # what the restriction is for: a special token repeated never yields text
    stream = decoders.DecodeStream(ids=prompt, skip_special_tokens=True)
    assert stream.step(tok, 0) is None and stream.step(tok, 0) is None
    body = online.Target("http://x", "stock", "m", {}, ids).request(
        online.Turn(0, "t", "hi", 4), {"t": "ctx"})[1]
    assert body["allowed_token_ids"] == list(ids)
    assert "allowed_token_ids" not in online.Target("http://x", "stock", "m", {}).request(
        online.Turn(0, "t", "hi", 4), {"t": "ctx"})[1]


def test_report_reads_gzipped_runs_and_the_team_run(tmp_path: Path) -> None:
    import gzip

    from granikv_engine.bench import online_report

    results = [dict(index=i, team="t", sent=0.0, first=0.5, done=2.0, chunks=[0.5, 1.0, 2.0],
                    completion_tokens=3, streamed_tokens=3, prompt_tokens=9, cached_tokens=5,
                    error=None) for i in range(4)]
    for side, done in (("stock", 2.0), ("platform", 1.0)):
        rs = [{**r, "done": done} for r in results]
        run = {"workload": "W1-online", "side": side, "mode": "closed", "rate": None,
               "requests": 4, "summary": online.summarize(rs), "results": rs, "command": side}
        with gzip.open(tmp_path / f"online-W1-online-{side}-closed.json.gz", "wt") as f:
            json.dump(run, f)
    (tmp_path / "online-team-run.json").write_text(json.dumps(
        {"status": "succeeded", "turns": 33, "agents": 33, "wall_s": 5.6,
         "hot_hits_added": 33, "command": "team"}))
    online_report.main(["--runs", str(tmp_path), "--out", str(tmp_path / "r"), "--name", "s"])
    summary = json.loads((tmp_path / "r" / "s.json").read_text())
    (row,) = summary["rows"]
    assert row["stock_tok_s"] == pytest.approx(12 / 2.0)
    assert row["platform_tok_s"] == pytest.approx(12 / 1.0)
    assert row["platform_vs_stock"] == pytest.approx(2.0) and row["platform_vs_granikv"] is None
    assert summary["team_runs"][0]["turns"] == 33 and "team" in summary["commands"]
    md = (tmp_path / "r" / "s.md").read_text()
    assert "| 2.00x / - | - / - |" in md and "33 turns of 33 agents in 5.6 s" in md


def test_report_rows_by_stream_interval_with_both_fronts(tmp_path: Path) -> None:
    """Each (workload, load, stream interval, GPU) is a row; the platform's two fronts
    are columns of it, each compared with stock and GraniKV."""
    from granikv_engine.bench import online_report

    base = dict(index=0, team="t", sent=0.0, first=0.5, chunks=[0.5, 1.0],
                completion_tokens=4, streamed_tokens=4, prompt_tokens=9, cached_tokens=0,
                error=None)
    for si in (1, 16):
        for side, front, done in (("stock", "", 4.0), ("granikv", "", 1.0),
                                  ("platform", "proxy", 2.0), ("platform", "haproxy", 1.0)):
            rs = [{**base, "done": done / (1 if si == 1 else 2)}]
            run = {"workload": "W1-online", "side": side, "front": front, "mode": "closed",
                   "rate": None, "requests": 1, "stream_interval": si, "gpu": "GPU-X",
                   "summary": online.summarize(rs), "results": rs, "command": side}
            (tmp_path / f"online-W1-online-{side}{front}-{si}.json").write_text(
                json.dumps(run))
    online_report.main(["--runs", str(tmp_path), "--out", str(tmp_path / "r"), "--name", "s"])
    rows = json.loads((tmp_path / "r" / "s.json").read_text())["rows"]
    assert [(r["stream_interval"], r["gpu"]) for r in rows] == [(1, "GPU-X"), (16, "GPU-X")]
    for r in rows:
        assert r["platform_vs_stock"] == pytest.approx(2.0)
        assert r["haproxy_vs_stock"] == pytest.approx(4.0)
        assert r["haproxy_vs_granikv"] == pytest.approx(1.0)
    md = (tmp_path / "r" / "s.md").read_text()
    assert "| W1-online | closed | 16 |" in md and "| 2.00x / 4.00x | 0.50x / 1.00x |" in md
    # the latency table: TTFT p50, p99 (s), TPOT p50, p99 (ms) per side, stock first
    tpot = " / ".join(f"{1e3 * (d - 0.5) / 3:.1f}" for d in (4.0, 1.0, 2.0, 1.0))
    assert f"| W1-online | closed | 1 | {' / '.join(['0.50'] * 4)} | " in md
    assert f"| {tpot} | {tpot} |" in md


def test_a_salted_run_keeps_the_contexts_and_sends_other_agent_messages() -> None:
    words = online.word_pool(TOKENIZER / "tokenizer.json")
    first = online.standard("W3-online", words, scale=0.02)
    again = online.standard("W3-online", words, scale=0.02)
    later = online.standard("W3-online", words, scale=0.02, salt="2")
    assert first == again and later.contexts == first.contexts
    assert len(later.turns) == len(first.turns)
    assert not {t.own for t in later.turns} & {t.own for t in first.turns}

"""W6 and W7 end to end at a tiny scale on the CPU build: stock with its no-context
ceiling runs, then GraniKV, through bench/timed.py and the report, as on the H200.

Two engine start-ups (30-90 s each on a 2-core machine): the one test that runs the
heterogeneous workloads' path (skewed mix, turns and histories, the ceiling) on real
engines."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from granikv_engine.bench.ceiling import decode_groups
from granikv_engine.bench.workloads import WORKLOADS, mix

pytestmark = pytest.mark.vllm
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

TINY = str(Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama")
SCALE = 0.01  # W6: contexts 15..163 tokens, own 2..15, generated 2..5; W7: 2 new, 2 out
WS = [WORKLOADS["W6"], WORKLOADS["W7"]]


def _engine(engine: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The engine's results and its stats after the last workload."""
    from granikv_engine.bench import e2e, timed
    from granikv_engine.vllm_plugin.client import control

    max_len = max(w.max_len_at(SCALE) for w in WS) + 8
    llm = e2e.make_llm(TINY, engine, max_len, 2048, True,
                       {"dtype": "float32", "enforce_eager": True})
    try:
        llm.collective_rpc("granikv_reinit_weights")
        vocab = llm.llm_engine.vllm_config.model_config.get_vocab_size()
        rs = list(timed.run_workloads(llm, engine, WS, vocab, SCALE, capped={"W6", "W7"}))
        return rs, control(llm, "stats")
    finally:
        llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    stock, _ = _engine("stock")
    gk, gk_stats = _engine("granikv")
    return {"results": stock + gk, "gk_stats": gk_stats}


def test_every_engine_runs_both_workloads_and_stock_its_ceiling(runs: dict[str, Any]) -> None:
    rs = runs["results"]
    assert [(r["engine"], r["workload"]) for r in rs] == [
        ("stock", "W6"), ("stock-noctx", "W6"), ("stock", "W7"), ("stock-noctx", "W7"),
        ("granikv", "W6"), ("granikv", "W7")]
    w6_out = sum(out for _, _, out in mix(WORKLOADS["W6"], SCALE))
    for r in rs:  # min_tokens = max_tokens: every request generated its count
        assert r["output_tokens"] == (w6_out if r["workload"] == "W6" else 4 * 128 * 2)
        assert r["tok_s"] > 0 and r["ttft_s"]["p50"] <= r["ttft_s"]["p90"]
    cut = [r for r in rs if r["engine"] == "stock-noctx"]
    assert all(r["context_cut"] == 16 and "ceiling" in r for r in cut)
    assert not any("ceiling" in r for r in rs if r["engine"] != "stock-noctx")


def test_the_ceiling_is_the_no_context_run_plus_the_priced_work(runs: dict[str, Any]) -> None:
    w6 = next(r for r in runs["results"] if r["engine"] == "stock-noctx" and r["workload"] == "W6")
    c, p = w6["ceiling"], w6["priced"]
    assert c["no_context_wall_s"] == w6["wall_s"] and p["prefill_s"] > 0 and p["decode_s"] > 0
    assert c["wall_s"] == w6["wall_s"] + (p["prefill_s"] + p["decode_s"])
    assert c["tok_s"] == w6["output_tokens"] / c["wall_s"]
    steps = [(t, out - 1) for t, _, out in mix(WORKLOADS["W6"], SCALE)]
    assert c["passes"] == sum(decode_groups(steps, 384).values())


def test_w7_runs_four_turns_each_measured(runs: dict[str, Any]) -> None:
    for r in (r for r in runs["results"] if r["workload"] == "W7"):
        assert [t["output_tokens"] for t in r["turns"]] == [256] * 4
        assert all(t["ttft_s"]["p50"] <= t["ttft_s"]["p90"] for t in r["turns"])
        assert r["wall_s"] == sum(t["wall_s"] for t in r["turns"])
        if r["engine"] == "stock-noctx":
            assert all("ceiling" in t for t in r["turns"])


def test_granikv_binds_every_request_and_leaves_the_arena_empty(runs: dict[str, Any]) -> None:
    gk = {r["workload"]: r for r in runs["results"] if r["engine"] == "granikv"}
    assert gk["W6"]["hits"] == 384 and gk["W7"]["hits"] == 4 * 128
    assert gk["W7"]["stats_after"]["hot"]["entries"] == 4  # W6's 6 contexts are gone
    assert runs["gk_stats"]["hot"]["entries"] == 0 and runs["gk_stats"]["hot"]["used"] == 0


def test_the_report_writes_the_tables_and_the_plot(runs: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from granikv_engine.bench import report
    from granikv_engine.bench.env import environment

    doc = {"env": environment(), "results": runs["results"]}
    (tmp_path / "e2e-tiny.json").write_text(json.dumps(doc))
    monkeypatch.setattr(sys, "argv", ["report", "--runs", str(tmp_path), "--out",
                                      str(tmp_path / "out"), "--name", "agents"])
    report.main()
    md = (tmp_path / "out" / "agents.md").read_text()
    assert (tmp_path / "out" / "agents.png").stat().st_size > 0
    assert md.count("(measured) |") == 2 and "## Ceilings, measured" in md
    turns = md.split("## Multi-turn agents, turn by turn")[1]
    assert [line.split("|")[2].strip() for line in turns.splitlines()
            if line.startswith("| W7")] == ["1", "2", "3", "4"]

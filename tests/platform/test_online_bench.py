"""The online load generator (granikv_engine/bench/online.py) against the suite's Serve
app, platform side, at a tiny scale: every request gets all its tokens, one stream
chunk per token, with the team context spliced in; the report makes its table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from granikv_engine.bench import online, online_report
from tests.platform.conftest import API_KEYS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
TOKENIZER = Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama"


def test_platform_side_of_the_online_benchmark(base_url: str, tmp_path: Path) -> None:
    words = online.word_pool(TOKENIZER / "tokenizer.json")
    work = online.standard("W1-online", words, scale=0.03, teams=["bench"])
    context_tokens = 491  # 16384 * 0.03 words, about one token each
    assert len(work.turns) == 7 and {t.gen_tokens for t in work.turns} == {7}
    target = online.Target(base_url, "platform", "tiny-llama", {"bench": API_KEYS["bench"]})
    out = online.run(target, work, procs=2)
    s = out["summary"]
    assert s["errors"] == 0, s["error_examples"]
    assert s["ok"] == 7 and s["output_tokens"] == 49 and s["output_tok_s"] > 0
    for r in out["results"]:
        assert r["completion_tokens"] == 7 and len(r["chunks"]) == 7, r
        assert r["first"] is not None and r["sent"] <= r["first"] <= r["done"]
        assert r["prompt_tokens"] > context_tokens * 0.9, r  # the context is in the prompt
    assert s["ttft_s"]["p50"] is not None and s["itl_s"]["p50"] is not None

    (tmp_path / "online-W1-online-platform-closed.json").write_text(json.dumps(out))
    online_report.main(["--runs", str(tmp_path), "--out", str(tmp_path / "report"),
                        "--name", "summary", "--gpu", "cpu", "--commit", "test"])
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    row = summary["rows"][0]
    assert row["workload"] == "W1-online" and row["mode"] == "closed"
    assert row["platform_tok_s"] == pytest.approx(s["output_tok_s"])
    assert row["stock_tok_s"] is None and row["platform_vs_stock"] is None
    assert (tmp_path / "report" / "summary.png").stat().st_size > 0
    assert "| W1-online | closed |" in (tmp_path / "report" / "summary.md").read_text()


def test_open_loop_arrivals_are_poisson_and_seeded() -> None:
    a = online.arrivals(2000, 50.0, seed=3)
    assert a == online.arrivals(2000, 50.0, seed=3) and a[0] == 0.0
    gaps = [y - x for x, y in zip(a, a[1:])]
    assert all(g >= 0 for g in gaps)
    assert 0.018 < sum(gaps) / len(gaps) < 0.022  # mean gap 1/rate
    assert online.arrivals(5, None, seed=3) == [0.0] * 5

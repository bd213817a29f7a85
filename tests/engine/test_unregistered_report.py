"""bench/unregistered_report.py on runs written as bench/e2e.py and bench/online.py write
them: each result lands in its column, ratios are against stock, the registered runs
are the ceiling (W6/W7: stock's no-context ceiling), and a side not run stays empty."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ENV = {"gpu": "GPU X", "date": "2026-12-06 10:00:00 UTC", "command": "e2e.py"}


def _e2e(d: Path, name: str, results: list[dict[str, Any]]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"ttft_s": {"p50": 1.0}, **r} for r in results]
    (d / f"e2e-{name}.json").write_text(json.dumps({"env": ENV, "results": rows}))


def _online(d: Path, name: str, workload: str, side: str, label: str, tok_s: float) -> None:
    d.mkdir(parents=True, exist_ok=True)
    run = {"workload": workload, "side": side, "label": label, "gpu": "GPU X",
           "summary": {"output_tok_s": tok_s, "ttft_s": {"p50": 2.0},
                       "tpot_s": {"p50": 0.02}, "errors": 0, "cut": 0}}
    (d / f"online-{name}.json.gz").write_bytes(gzip.compress(json.dumps(run).encode()))


def test_the_tables_put_each_run_in_its_column(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    _e2e(runs / "offline" / "stock", "stock", [
        {"engine": "stock", "workload": "W1", "tok_s": 2000.0},
        {"engine": "stock", "workload": "W6", "tok_s": 1000.0},
        {"engine": "stock-noctx", "workload": "W6", "tok_s": 3000.0,
         "ceiling": {"tok_s": 2000.0}}])
    _e2e(runs / "offline" / "implicit", "implicit", [
        {"engine": "granikv-implicit-unreg", "workload": "W1", "tok_s": 5000.0},
        {"engine": "granikv-implicit-unreg", "workload": "W6", "tok_s": 1800.0},
        {"engine": "granikv-implicit", "workload": "W1", "tok_s": 6000.0}])
    _online(runs / "stock", "a", "W1-online", "stock", "", 2000.0)
    _online(runs / "granikv", "b", "W1-online", "stock", "1-stock", 1900.0)
    _online(runs / "granikv", "c", "W1-online", "granikv", "2-granikv", 6000.0)
    _online(runs / "granikv", "d", "W1-online", "granikv", "4-granikv", 5800.0)
    subprocess.run([sys.executable, "-m", "granikv_engine.bench.unregistered_report",
                    "--runs", str(runs), "--out", str(out), "--name", "t", "--commit", "abc"],
                   check=True, capture_output=True)
    doc = json.loads((out / "t.json").read_text())
    assert doc["offline"]["W1"]["on"]["tok_s"] == 5000.0
    assert doc["offline"]["W1"]["on-reg"]["tok_s"] == 6000.0
    assert "off" not in doc["offline"]["W1"]
    assert doc["heterogeneous"]["W6"]["ceiling"]["tok_s"] == 2000.0
    w1 = doc["online"]["W1-online"]
    assert (w1["stock"]["tok_s"], w1["off"]["tok_s"]) == (2000.0, 1900.0)
    assert (w1["off-reg"]["tok_s"], w1["off-rereg"]["tok_s"]) == (6000.0, 5800.0)
    assert doc["w1_online_after_reregistration_vs_fresh"] == 5800.0 / 6000.0
    md = (out / "t.md").read_text()
    assert "| W1 | 2,000 | - | 5,000 (**2.50x**) | - / 6,000 |" in md
    assert "2.5x: met" in md and "1.0x: not measured" in md
    assert "| W6 | 1,000 | 1,800 (**1.80x**) | 2,000 | **90%** |" in md
    assert "| W1-online | 2,000 | 1,900 (**0.95x**) | - |" in md
    assert "1.0x: missed by 5%" in md
    assert (out / "t.png").stat().st_size > 0

"""bench/context_pass.py: the line through a kernel run's points and the rates from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from granikv_engine.bench.context_pass import PEAK_FLOPS, analyse, decode_step, fit_line

REPO = Path(__file__).resolve().parents[2]


def kernel_points(fixed_us: float, tflops: float, b: int = 256, s: int = 64) -> list[dict]:
    """Points of a layer whose context pass streams at ``tflops`` (Llama-3.1-8B shapes),
    plus a decode-step point at S=640 that reads its 576 more own tokens in 100 us."""
    per_token_us = 4 * b * 32 * 128 / (tflops * 1e12) * 1e6
    pts = [{"model": "llama-3.1-8b", "B": b, "Lp": lp, "S": s,
            "granikv_cascade_us": fixed_us + per_token_us * lp, "stock_us": 10.0 * lp}
           for lp in (1024, 4096, 16384)]
    pts.append({"model": "llama-3.1-8b", "B": b, "Lp": 16384, "S": 640,
                "granikv_cascade_us": fixed_us + per_token_us * 16384 + 100.0,
                "stock_us": 1.0})
    pts.append({"model": "qwen2.5-14b", "B": b, "Lp": 16384, "S": s,  # another model: ignored
                "granikv_cascade_us": 1.0, "stock_us": 1.0})
    return pts


def test_fit_line_recovers_a_line_and_needs_two_lengths() -> None:
    a, b = fit_line([1.0, 2.0, 4.0], [5.0, 7.0, 11.0])
    assert a == pytest.approx(3.0) and b == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two context lengths"):
        fit_line([16384.0], [1.0])


def test_analyse_splits_the_layer_into_fixed_and_streaming() -> None:
    pts = kernel_points(fixed_us=90.0, tflops=600.0)
    a = analyse(pts, "llama-3.1-8b", 256, 64, 16384)
    assert a["fixed_us"] == pytest.approx(90.0)
    assert a["streaming_tflops"] == pytest.approx(600.0)
    assert a["streaming_of_peak"] == pytest.approx(600e12 / PEAK_FLOPS)
    assert a["max_fit_error_us"] == pytest.approx(0.0, abs=1e-6)
    flop = 4 * 256 * 32 * 16384 * 128
    assert a["context_flop"] == flop
    assert a["layer_tflops"] == pytest.approx(flop / ((90.0 + a["context_us"]) * 1e-6) / 1e12)
    step = decode_step(pts, a, 640)
    assert step["more_suffix_us"] == pytest.approx(100.0)
    # 256 rows x 576 tokens x 8 KV heads x 128 x (K, V) x 2 bytes in 100 us
    assert step["more_suffix_tbs"] == pytest.approx(256 * 576 * 8 * 128 * 4 / 100e-6 / 1e12)
    with pytest.raises(ValueError, match="no kernel points"):
        analyse(pts, "llama-3.1-8b", 512, 64, 16384)


def test_the_cli_writes_table_json_and_plot(tmp_path: Path) -> None:
    run = tmp_path / "kernels.json"
    run.write_text(json.dumps({"env": {"gpu": "test"}, "points": kernel_points(50.0, 500.0)}))
    subprocess.run([sys.executable, "-m", "granikv_engine.bench.context_pass", "--kernels",
                    str(run), "--out", str(tmp_path), "--name", "cp"], check=True, cwd=REPO,
                   capture_output=True)
    md = (tmp_path / "cp.md").read_text()
    assert "**500 TFLOP/s**" in md and "(cp.png)" in md
    assert json.loads((tmp_path / "cp.json").read_text())["analysis"]["fixed_us"] == \
        pytest.approx(50.0)
    assert (tmp_path / "cp.png").stat().st_size > 1000

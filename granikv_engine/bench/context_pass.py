"""The HOT context pass's FLOP rate, from a kernel benchmark run (``bench/kernels.py``).

GraniKV's cascade layer in a decode step is three launches: the context pass (every row
of a team group over the team's dense context), the suffix pass (each row over its own
COLD tokens, page 1) and the merge of the two. The benchmark times the layer as a whole,
at several context lengths Lp for each (model, B, S). The context pass is the only part
whose work grows with Lp, so a least-squares line t(Lp) = fixed + per_token * Lp over
those points splits the layer: ``per_token * Lp`` is the context pass's streaming work,
``fixed`` everything that does not depend on the context (the suffix pass, the merge, the
split-KV combine, launches). The context pass does 4 * B * Hq * Lp * D FLOP (QK^T and PV),
so its streaming rate is 4 * B * Hq * D / per_token.

    python -m granikv_engine.bench.context_pass --kernels RUN/kernels.json \\
        --out docs/benchmarks --name NAME [--model llama-3.1-8b --batch 256 --suffix 64]

writes NAME.md (the fit, the rates against the H200's bf16 peaks, the decode step's
split), NAME.json and NAME.png (the measured points and the line).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from granikv_engine.bench.kernels import FLOPS as GEMM_FLOPS
from granikv_engine.bench.kernels import SHAPES

PEAK_FLOPS = 989e12  # H200 SXM, dense bf16 (NVIDIA's datasheet)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b * x; (a, b). Needs two distinct x at least."""
    if len(set(xs)) < 2:
        raise ValueError(f"need points at two context lengths at least, got {sorted(set(xs))}")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def analyse(points: list[dict[str, Any]], model: str, batch: int, suffix: int,
            context: int) -> dict[str, Any]:
    """The split of the cascade layer at (model, batch, suffix) over its Lp points, and
    the rates at ``context`` tokens of context."""
    h, _, d = SHAPES[model]
    rows = sorted((p for p in points if (p["model"], p["B"], p["S"]) == (model, batch, suffix)),
                  key=lambda p: p["Lp"])
    if not rows:
        raise ValueError(f"no kernel points for {model} B={batch} S={suffix}")
    xs = [float(p["Lp"]) for p in rows]
    ys = [float(p["granikv_cascade_us"]) for p in rows]
    fixed_us, per_token_us = fit_line(xs, ys)
    flop_per_token = 4 * batch * h * d
    streaming = flop_per_token / (per_token_us * 1e-6)
    at = next((p for p in rows if p["Lp"] == context), None)
    flops = flop_per_token * context
    out: dict[str, Any] = {
        "model": model, "B": batch, "S": suffix, "context": context,
        "points": [{"Lp": p["Lp"], "cascade_us": p["granikv_cascade_us"],
                    "stock_us": p["stock_us"],
                    "fit_us": fixed_us + per_token_us * p["Lp"]} for p in rows],
        "fixed_us": fixed_us, "per_token_ns": per_token_us * 1e3,
        "max_fit_error_us": max(abs(y - (fixed_us + per_token_us * x)) for x, y in zip(xs, ys)),
        "context_flop": flops, "context_us": per_token_us * context,
        "streaming_tflops": streaming / 1e12,
        "streaming_of_peak": streaming / PEAK_FLOPS,
        "streaming_of_gemm": streaming / GEMM_FLOPS,
    }
    if at is not None:
        layer = float(at["granikv_cascade_us"])
        out.update(layer_us=layer, layer_tflops=flops / (layer * 1e-6) / 1e12,
                   layer_of_peak=flops / (layer * 1e-6) / PEAK_FLOPS,
                   stock_layer_us=float(at["stock_us"]),
                   stock_tflops=flops / (at["stock_us"] * 1e-6) / 1e12)
    return out


def decode_step(points: list[dict[str, Any]], a: dict[str, Any], suffix: int) -> dict[str, Any]:
    """The cascade layer at ``suffix`` own tokens a row (the decode step's), split into
    the context pass's streaming work, the fixed part (at a's suffix) and the extra
    suffix reading."""
    p = next((p for p in points if (p["model"], p["B"], p["Lp"], p["S"]) == (
        a["model"], a["B"], a["context"], suffix)), None)
    if p is None:
        raise ValueError(f"no kernel point at B={a['B']} Lp={a['context']} S={suffix}")
    layer = float(p["granikv_cascade_us"])
    rest = layer - a["context_us"] - a["fixed_us"]
    _, hkv, d = SHAPES[a["model"]]
    extra_bytes = a["B"] * (suffix - a["S"]) * hkv * d * 2 * 2  # K and V, bf16
    return {"S": suffix, "layer_us": layer, "context_us": a["context_us"],
            "fixed_us": a["fixed_us"], "more_suffix_us": rest,
            "more_suffix_tbs": extra_bytes / (rest * 1e-6) / 1e12 if rest > 0 else None,
            "context_share": a["context_us"] / layer}


def table(a: dict[str, Any], step: dict[str, Any] | None) -> str:
    lines = [
        "| Lp | GraniKV cascade us (measured) | line us | stock FA3 p16 us |",
        "|---|---|---|---|",
        *(f"| {p['Lp']:,} | {p['cascade_us']:.1f} | {p['fit_us']:.1f} | {p['stock_us']:.1f} |"
          for p in a["points"]),
        "",
        "| quantity | value |",
        "|---|---|",
        f"| line: fixed part | {a['fixed_us']:.1f} us |",
        f"| line: per context token | {a['per_token_ns']:.2f} ns (worst point off the line "
        f"by {a['max_fit_error_us']:.1f} us) |",
        f"| context pass at Lp={a['context']:,}: FLOP | {a['context_flop'] / 1e9:.1f} G |",
        f"| context pass at Lp={a['context']:,}: streaming time | {a['context_us']:.1f} us |",
        f"| context pass: streaming rate | **{a['streaming_tflops']:.0f} TFLOP/s** = "
        f"{a['streaming_of_peak']:.0%} of {PEAK_FLOPS / 1e12:.0f} (bf16 dense peak), "
        f"{a['streaming_of_gemm']:.0%} of {GEMM_FLOPS / 1e12:.0f} (measured bf16 GEMM) |",
    ]
    if "layer_us" in a:
        lines += [
            f"| whole layer at Lp={a['context']:,}, S={a['S']} | {a['layer_us']:.1f} us: "
            f"{a['layer_tflops']:.0f} TFLOP/s of context work ({a['layer_of_peak']:.0%} "
            "of peak) |",
            f"| stock (FA3 paged, block 16) at the same point | {a['stock_layer_us']:.1f} us: "
            f"{a['stock_tflops']:.0f} TFLOP/s of the same work |",
        ]
    if step is not None:
        tbs = f" ({step['more_suffix_tbs']:.1f} TB/s)" if step["more_suffix_tbs"] else ""
        lines += [
            f"| decode-step layer at S={step['S']} | {step['layer_us']:.1f} us = context "
            f"streaming {step['context_us']:.1f} ({step['context_share']:.0%}) + fixed "
            f"{step['fixed_us']:.1f} + reading {step['S'] - a['S']} more own tokens a row "
            f"{step['more_suffix_us']:.1f}{tbs} |",
        ]
    return "\n".join(lines)


def plot(a: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [p["Lp"] for p in a["points"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [p["cascade_us"] for p in a["points"]], "o", label="GraniKV cascade (measured)")
    ax.plot([0, max(xs)], [a["fixed_us"], a["fixed_us"] + a["per_token_ns"] * 1e-3 * max(xs)],
            "-", label=f"line: {a['fixed_us']:.0f} us + {a['per_token_ns']:.2f} ns x Lp")
    ax.set_xlabel("team context tokens (Lp)")
    ax.set_ylabel("us per layer")
    ax.set_title(f"{a['model']}, B={a['B']}, S={a['S']}: context pass "
                 f"{a['streaming_tflops']:.0f} TFLOP/s streaming")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=Path, required=True, help="bench/kernels.py's JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--model", default="llama-3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--suffix", type=int, default=64, help="S of the line's points")
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--step-suffix", type=int, default=640,
                    help="S of the decode step to split (W1: 512 own + up to 256 generated)")
    ap.add_argument("--commit", default="")
    ap.add_argument("--date", default="")
    args = ap.parse_args()
    doc = json.loads(args.kernels.read_text())
    a = analyse(doc["points"], args.model, args.batch, args.suffix, args.context)
    step = decode_step(doc["points"], a, args.step_suffix)
    env = doc.get("env", {})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(
        {"analysis": a, "decode_step": step, "kernels_env": env, "commit": args.commit,
         "date": args.date}, indent=1))
    plot(a, args.out / f"{args.name}.png")
    md = (f"# The context pass's FLOP rate ({args.model}, B={args.batch})\n\n"
          f"Kernel points: {env.get('gpu', '?')}, {env.get('date', '?')}, "
          f"`{env.get('command', '?')}`; analysed {args.date} at `{args.commit}` with "
          f"`python -m granikv_engine.bench.context_pass --kernels {args.kernels} "
          f"--out {args.out} --name {args.name} --model {args.model} --batch {args.batch} "
          f"--suffix {args.suffix} --context {args.context} "
          f"--step-suffix {args.step_suffix}`\n\n{table(a, step)}\n\n![plot]({args.name}.png)\n")
    (args.out / f"{args.name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()

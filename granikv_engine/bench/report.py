"""Turn benchmark JSON into docs/benchmarks/: markdown tables and PNG plots.

``python -m granikv_engine.bench.report --runs DIR [DIR...] --out docs/benchmarks``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from granikv_engine.bench.ceiling import CONTEXT_FLOPS, HBM_BYTES_S
from granikv_engine.bench.workloads import MAX_NUM_SEQS, WORKLOADS, Workload
from granikv_engine.stats import parse_size_key


def load(dirs: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    runs, kernels = [], None
    for d in dirs:
        for f in sorted(d.glob("e2e-*.json")):
            runs.append(json.loads(f.read_text()))
        if (d / "kernels.json").exists():
            kernels = json.loads((d / "kernels.json").read_text())
    return runs, kernels


def _seqs(r: dict[str, Any]) -> int:
    return int(r.get("max_num_seqs", MAX_NUM_SEQS))  # older JSON: 512, then hard-coded


def _settings(rs: list[dict[str, Any]]) -> dict[str, set[int]]:
    """Each workload's max_num_seqs settings among the results."""
    out: dict[str, set[int]] = {}
    for r in rs:
        out.setdefault(r["workload"], set()).add(_seqs(r))
    return out


def best_results(rs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per workload and engine one result: each engine at its best max_num_seqs. Of two
    runs at the same max_num_seqs the later counts (no best-of over repeats)."""
    last = {(r["workload"], r["engine"], _seqs(r)): r for r in rs}
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for (workload, engine, _), r in last.items():
        e = by.setdefault(workload, {})
        if engine not in e or r["tok_s"] > e[engine]["tok_s"]:
            e[engine] = r
    return by


def _ceiling_tok_s(e: dict[str, dict[str, Any]]) -> float | None:
    """The measured ceiling: the no-context stock run plus the priced prefix work."""
    nc = e.get("stock-noctx")
    return nc["ceiling"]["tok_s"] if nc and "ceiling" in nc else None


def e2e_table(runs: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, float]]]:
    """Per workload and engine one result (``best_results``): each engine at its best
    max_num_seqs, named in the workload cell where the workload ran at more than one.
    The ceiling is the measured one where a no-context stock run priced it, else the
    workload's prior estimate."""
    rs = [r for run in runs for r in run["results"]]
    by = best_results(rs)
    seqs = _settings(rs)
    lines = ["| workload | stock tok/s | GraniKV tok/s | speedup | target | ceiling | "
             "% of ceiling | paged-only tok/s | no FULL graphs tok/s | stock-cascade tok/s | "
             "TTFT p50 s (stock / GraniKV) | ITL p50 ms (stock / GraniKV) |",
             "|" + "---|" * 12]
    speed: dict[str, dict[str, float]] = {}
    for name in sorted(by):
        e = by[name]
        st, gk = e.get("stock"), e.get("granikv")
        x = f"**{gk['tok_s'] / st['tok_s']:.2f}x**" if st and gk else "not measured"
        speed[name] = {k: v["tok_s"] for k, v in e.items()}

        def f(r: dict[str, Any] | None, key: str = "tok_s") -> str:
            return f"{r[key]:,.0f}" if r else "-"

        def lat(key: str, scale: float, pair: tuple[Any, Any] = (st, gk)) -> str:
            vals = [r[key].get("p50") if r else None for r in pair]
            return " / ".join(f"{v * scale:.2f}" if v is not None else "-" for v in vals)

        label = name
        if len(seqs[name]) > 1:  # the workload ran at more than one: each engine's best
            chosen = [f"{shown} {_seqs(r)}" for shown, r in (("stock", st), ("GraniKV", gk))
                      if r]
            label += f" (max_num_seqs: {', '.join(chosen)})"
        w = WORKLOADS[name]
        cap, of = _ceiling_cells(w, e, speed[name])
        target = f"{w.target_x}x" if w.target_x else f"{w.target_of_ceiling:.0%} of ceiling"
        lines.append(f"| {label} | {f(st)} | {f(gk)} | {x} | {target} | {cap} | {of} | "
                     f"{f(e.get('granikv-paged'))} | {f(e.get('granikv-piecewise'))} | "
                     f"{f(e.get('stock-cascade'))} | {lat('ttft_s', 1)} | "
                     f"{lat('itl_s', 1e3)} |")
    return "\n".join(lines), speed


def _ceiling_cells(w: Workload, e: dict[str, dict[str, Any]],
                   speed: dict[str, float]) -> tuple[str, str]:
    """The ceiling (as a speedup over stock) and GraniKV's share of it."""
    st, gk, cap = e.get("stock"), e.get("granikv"), _ceiling_tok_s(e)
    if cap is not None:
        speed["ceiling"] = cap
        x = f"{cap / st['tok_s']:.2f}x (measured)" if st else f"{cap:,.0f} tok/s (measured)"
        return x, f"{gk['tok_s'] / cap:.0%}" if gk else "-"
    if not w.ceiling_x:
        return "-", "-"
    of = f"{gk['tok_s'] / st['tok_s'] / w.ceiling_x:.0%}" if st and gk else "-"
    return f"{w.ceiling_x}x", of


CEILING_NOTE = (
    "Ceiling = output tokens / (wall time of the same stock engine with every team context "
    "cut to 16 tokens + the priced prefix work). Priced, per layer, at the kernel "
    "benchmark's rates (dense context pass {tflops:.0f} TFLOP/s, HBM {tbs:.1f} TB/s; the "
    "slower of compute and bytes): each request's fresh prompt tokens attend its team "
    "context once, and each decode step one context pass per team group (its rows' "
    "queries over the context's K/V, read once), decode steps scheduled ideally "
    "(max_num_seqs requests from the first step): bench/ceiling.py.\n")


def ceiling_table(runs: list[dict[str, Any]]) -> str:
    """Each measured ceiling and how it was computed ("" if none)."""
    by = best_results([r for run in runs for r in run["results"]])
    lines = ["| workload | no-context stock: tok/s, wall s | priced prefill s | "
             "priced context passes (count, s) | ceiling tok/s (wall s) | ceiling vs stock | "
             "GraniKV tok/s | % of ceiling | target |", "|" + "---|" * 9]
    for name in sorted(by):
        e = by[name]
        nc, st, gk = e.get("stock-noctx"), e.get("stock"), e.get("granikv")
        if not nc or "ceiling" not in nc:
            continue
        c, w = nc["ceiling"], WORKLOADS[name]
        target = f"{w.target_x}x" if w.target_x else f"{w.target_of_ceiling:.0%}"
        lines.append(
            f"| {name} | {nc['tok_s']:,.0f}, {nc['wall_s']:.2f} | {c['prefill_s']:.2f} | "
            f"{c['passes']:,}, {c['decode_s']:.2f} | {c['tok_s']:,.0f} ({c['wall_s']:.2f}) | "
            f"{_ratio(c, st, '.2f', 'x')} | {_tok(gk)} | {_ratio(gk, c, '.0%')} | {target} |")
    if len(lines) == 2:
        return ""
    note = CEILING_NOTE.format(tflops=CONTEXT_FLOPS / 1e12, tbs=HBM_BYTES_S / 1e12)
    return note + "\n" + "\n".join(lines)


def _tok(r: dict[str, Any] | None) -> str:
    return f"{r['tok_s']:,.0f}" if r else "-"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, fmt: str,
           unit: str = "") -> str:
    """a's tok/s over b's."""
    return f"{a['tok_s'] / b['tok_s']:{fmt}}{unit}" if a and b else "-"


def _ttft(r: dict[str, Any] | None) -> str:
    return f"{r['ttft_s']['p50']:.2f} / {r['ttft_s']['p90']:.2f}" if r else "-"


def turns_table(runs: list[dict[str, Any]]) -> str:
    """Multi-turn workloads, turn by turn: tok/s, the ceiling, TTFT ("" if none)."""
    by = best_results([r for run in runs for r in run["results"]])
    lines = ["| workload | turn | stock tok/s | GraniKV tok/s | speedup | ceiling tok/s | "
             "% of ceiling | TTFT p50 / p90 s, stock | TTFT p50 / p90 s, GraniKV |",
             "|" + "---|" * 9]
    for name in sorted(by):
        e = by[name]
        st, gk, nc = (e.get(k, {}).get("turns") for k in ("stock", "granikv", "stock-noctx"))
        for k in range(max(len(t or []) for t in (st, gk, nc))):
            a, b, c = ((t[k] if t and k < len(t) else None) for t in (st, gk, nc))
            lines.append(
                f"| {name} | {k + 1} | {_tok(a)} | {_tok(b)} | {_ratio(b, a, '.2f', 'x')} | "
                f"{_tok(c and c.get('ceiling'))} | {_ratio(b, c and c.get('ceiling'), '.0%')} | "
                f"{_ttft(a)} | {_ttft(b)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def step_table(runs: list[dict[str, Any]]) -> str:
    """Where a step's time goes, from the engines' own counters."""
    lines = ["| engine | workload | max_num_seqs | wall s | engine steps | TTFT p50 s | "
             "decode step (ITL p50) ms | scheduler ms/step | HOT groups: cascade / paged | "
             "rows in cascade groups |", "|" + "---|" * 10]
    for run in runs:
        for r in run["results"]:
            sch = r.get("scheduler") or {}
            steps = sch.get("steps") or 0
            ms = 1e3 * (sch.get("schedule_s", 0) + sch.get("update_s", 0)) / max(steps, 1)
            disp = r.get("dispatch") or {}
            groups = disp.get("groups", {})
            rows = disp.get("rows", {})
            lines.append(
                f"| {r['engine']} | {r['workload']} | {_seqs(r)} | {r['wall_s']:.2f} | {steps} | "
                f"{r['ttft_s'].get('p50', 0):.2f} | {1e3 * r['itl_s'].get('p50', 0):.1f} | "
                f"{ms:.2f} | {groups.get('cascade', '-')} / {groups.get('paged', '-')} | "
                f"{rows.get('cascade', '-')} |")
    return "\n".join(lines)


STEP_KINDS = ("decode/full", "decode/piecewise", "mixed/full", "mixed/piecewise")


def dispatch_table(runs: list[dict[str, Any]]) -> str:
    """The dispatcher's choices by HOT group size, and the steps by kind: decode-only or
    mixed with prefill, replayed in a FULL CUDA graph or run piecewise ("" if no run
    counted them)."""
    rs = [r for run in runs for r in run["results"]
          if (r.get("dispatch") or {}).get("group_sizes") is not None]
    lines = ["| engine | workload | steps: " + " / ".join(STEP_KINDS) + " | HOT groups by "
             "size (rows up to): cascade / paged |", "|" + "---|" * 4]
    for r in rs:
        d = r["dispatch"]
        kinds = " / ".join(str(d.get("step_kinds", {}).get(k, 0)) for k in STEP_KINDS)
        by: dict[int, dict[str, int]] = {}
        for key, n in d["group_sizes"].items():
            size, backend = parse_size_key(key)
            by.setdefault(size, {})[backend] = n
        sizes = ", ".join(f"{size}: {c.get('cascade', 0)} / {c.get('paged', 0)}"
                          for size, c in sorted(by.items()))
        lines.append(f"| {r['engine']} | {r['workload']} | {kinds} | {sizes or '-'} |")
    return "\n".join(lines) if rs else ""


def seqs_table(runs: list[dict[str, Any]]) -> str:
    """Every result of the workloads run at more than one max_num_seqs ("" if none)."""
    rs = [r for run in runs for r in run["results"]]
    multi = {w for w, s in _settings(rs).items() if len(s) > 1}
    lines = ["| workload | engine | max_num_seqs | tok/s | ITL p50 ms | engine steps |",
             "|" + "---|" * 6]
    for r in sorted((r for r in rs if r["workload"] in multi),
                    key=lambda r: (r["workload"], r["engine"], _seqs(r))):
        steps = (r.get("scheduler") or {}).get("steps", "-")
        lines.append(f"| {r['workload']} | {r['engine']} | {_seqs(r)} | {r['tok_s']:,.0f} | "
                     f"{1e3 * r['itl_s'].get('p50', 0):.1f} | {steps} |")
    return "\n".join(lines) if multi else ""


def e2e_plot(speed: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = ["stock", "stock-cascade", "granikv-paged", "granikv-piecewise", "granikv",
               "stock-noctx", "ceiling"]
    names = sorted(speed)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.12
    for i, eng in enumerate(engines):
        vals = [speed[n].get(eng, 0) for n in names]
        ax.bar([j + i * width for j in range(len(names))], vals, width, label=eng)
    ax.set_xticks([j + 3 * width for j in range(len(names))], names)
    ax.set_ylabel("output tokens/s")
    ax.set_title("End to end on H200s (-TPn: n GPUs): stock vLLM 0.26 vs GraniKV (dummy weights)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def kernel_table(k: dict[str, Any]) -> str:
    lines = ["| model | B | Lp | S | stock FA3 p16 us | GraniKV cascade us | GraniKV paged p1 us |"
             " floor us | speedup | GraniKV TB/s (floor bytes) |", "|" + "---|" * 10]
    for r in k["points"]:
        lines.append(f"| {r['model']} | {r['B']} | {r['Lp']} | {r['S']} | {r['stock_us']:.1f} |"
                     f" {r['granikv_cascade_us']:.1f} | {r['granikv_paged_us']:.1f} | "
                     f"{r['floor_us']:.1f} | {r['speedup']:.2f}x | {r['granikv_bw_tbs']:.2f} |")
    return "\n".join(lines)


def kernel_plot(k: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    model = k["points"][0]["model"]
    for ax, lp in zip(axes, (1024, 4096, 16384)):
        for s in (64, 640, 2048):
            pts = [r for r in k["points"] if r["model"] == model and r["Lp"] == lp
                   and r["S"] == s]
            if pts:
                ax.plot([r["B"] for r in pts], [r["speedup"] for r in pts], marker="o",
                        label=f"S={s}")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{model}, Lp={lp}")
        ax.set_xlabel("agents B")
    axes[0].set_ylabel("speedup over FA3 paged (block 16)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    ap.add_argument("--name", default="e2e", help="end-to-end files: NAME.md, NAME.png")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs, kernels = load(args.runs)
    env = (runs[0] if runs else kernels or {}).get("env", {})
    head = (f"GPU: {env.get('gpu')}; vLLM {env.get('vllm')}; torch {env.get('torch')}; "
            f"FlashInfer {env.get('flashinfer')}; {env.get('date')}\n")
    if runs:
        table, speed = e2e_table(runs)
        cmds = sorted({r["env"]["command"] for r in runs})
        seqs = seqs_table(runs)
        (args.out / f"{args.name}.md").write_text(
            "# End to end: stock vLLM 0.26 vs GraniKV\n\n" + head + "\nCommands:\n"
            + "".join(f"- `{c}`\n" for c in cmds) + "\n" + table + "\n\n## Per step\n\n"
            + step_table(runs) + "\n"
            + "".join(f"\n## {title}\n\n{body}\n" for title, body in (
                ("The dispatcher's choices by group size, steps by kind",
                 dispatch_table(runs)),
                ("Ceilings, measured", ceiling_table(runs)),
                ("Multi-turn agents, turn by turn", turns_table(runs))) if body)
            + ("\n## Each engine's max_num_seqs\n\nThe workloads run at more than one "
               "max_num_seqs, every run; the first table keeps each engine's fastest.\n\n"
               + seqs + "\n" if seqs else ""))
        e2e_plot(speed, args.out / f"{args.name}.png")
    if kernels:
        (args.out / "kernels.md").write_text(
            "# Kernels, per layer (decode step)\n\n" + head + f"\nCommand: `"
            f"{kernels['env']['command']}`\n\n" + kernel_table(kernels) + "\n")
        kernel_plot(kernels, args.out / "kernels.png")


if __name__ == "__main__":
    main()

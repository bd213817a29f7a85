"""Tables of shared prompts nobody registered (``bench/runs/unregistered.sh``): stock vLLM
against GraniKV with implicit HOT off and on, offline and through ``vllm serve``, with
the registered runs as each row's ceiling, and the re-registration check.

    python -m granikv_engine.bench.unregistered_report --runs DIR --out docs/benchmarks \\
        --name 2026-12-06-unregistered --commit SHA

Reads the offline results (``DIR/offline/**/e2e-*.json``; W6 and W7 with the ceiling
of stock's no-context runs) and the online ones
(``DIR/{stock,granikv,granikv-implicit}/online-*.json``, or gzipped); writes
``NAME.json`` (the rows), ``NAME.md`` (the tables, targets, commands) and ``NAME.png``
(tok/s per side). A side that was not measured is left empty, never guessed.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

# (workload, target with implicit HOT off, target with it on)
OFFLINE_TARGETS = {"W1": (1.0, 2.5), "W3": (None, 2.3), "W5": (None, 0.98)}
ONLINE_TARGETS = {"W1-online": (1.0, 2.5), "W3-online": (None, 2.3)}


def offline(d: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{workload: {column: result}}; columns stock, off, on (nothing registered) and
    off-reg, on-reg (registered)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted((d / "offline").rglob("e2e-*.json")):
        doc = json.loads(path.read_text())
        for r in doc["results"]:
            eng = r["engine"]
            if eng == "stock-noctx" and "ceiling" in r:  # W6, W7: bench/ceiling.py
                out.setdefault(r["workload"], {})["ceiling"] = {
                    "tok_s": r["ceiling"]["tok_s"], "gpu": doc["env"]["gpu"]}
                continue
            col = {"stock": "stock", "granikv-unreg": "off", "granikv-implicit-unreg": "on",
                   "granikv": "off-reg", "granikv-implicit": "on-reg"}.get(eng)
            if col:
                out.setdefault(r["workload"], {})[col] = {
                    "tok_s": r["tok_s"], "ttft_p50_s": r["ttft_s"]["p50"],
                    "hits": r.get("hits"), "implicit_hits": (r.get("hit_counters") or {}).get(
                        "implicit_hits"), "gpu": doc["env"]["gpu"],
                    "date": doc["env"]["date"], "command": doc["env"]["command"]}
    return out


def online(d: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{workload: {column: run}}: stock; off / on (GraniKV sent to as stock); off-reg /
    on-reg (registered, fresh); off-rereg (registered again after W3-online)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for side, server in (("stock", "stock"), ("off", "granikv"), ("on", "granikv-implicit")):
        for path in sorted([*(d / server).glob("online-*.json"),
                            *(d / server).glob("online-*.json.gz")]):
            run = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz"
                             else path.read_bytes())
            label = run.get("label") or ""
            if side == "stock":
                col = "stock"
            elif label.endswith("-stock"):
                col = side
            else:  # registered: the first of its workload fresh, a later one again
                seen = out.get(run["workload"], {})
                col = f"{side}-reg" if f"{side}-reg" not in seen else f"{side}-rereg"
            s = run["summary"]
            out.setdefault(run["workload"], {})[col] = {
                "tok_s": s["output_tok_s"], "ttft_p50_s": s["ttft_s"]["p50"],
                "tpot_p50_s": s["tpot_s"]["p50"], "errors": s["errors"], "cut": s["cut"],
                "gpu": run.get("gpu"), "label": label, "command": run.get("command")}
    return out


def _x(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    return a["tok_s"] / b["tok_s"] if a and b and b["tok_s"] else None


def _f(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "" if v is None else fmt.format(v)


def _verdict(x: float | None, target: float | None) -> str:
    if target is None:
        return ""
    if x is None:
        return f"{target}x: not measured"
    return f"{target}x: {'met' if x >= target else f'missed by {100 * (1 - x / target):.0f}%'}"


def ceiling_table(rows: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """W6 and W7: GraniKV with nothing registered (implicit HOT on) against the
    workload's ceiling (target: 85% of it)."""
    lines = ["| workload | stock tok/s | implicit HOT on | ceiling | of the ceiling "
             "(target 85%) |", "|---|---|---|---|---|"]
    for w, cols in rows.items():
        st, on, c = cols.get("stock"), cols.get("on"), cols.get("ceiling")
        share = on["tok_s"] / c["tok_s"] if on and c else None
        lines.append(f"| {w} | {_f((st or {}).get('tok_s')) or '-'} | "
                     f"{_f((on or {}).get('tok_s')) or '-'}"
                     f"{f' (**{_x(on, st):.2f}x**)' if on and st else ''} | "
                     f"{_f((c or {}).get('tok_s')) or '-'} | "
                     f"{'' if share is None else f'**{100 * share:.0f}%**'} |")
    return lines


def table(rows: dict[str, dict[str, dict[str, Any]]], targets: dict[str, Any]) -> list[str]:
    lines = ["| workload | stock tok/s | GraniKV, implicit HOT off | implicit HOT on | "
             "ceiling: registered (off / on) | TTFT p50 s: stock / off / on | "
             "target off | target on |", "|---|---|---|---|---|---|---|---|"]
    for w, cols in rows.items():
        st = cols.get("stock")
        off, on = cols.get("off"), cols.get("on")
        reg = " / ".join(_f((cols.get(c) or {}).get("tok_s")) or "-"
                         for c in ("off-reg", "on-reg"))
        ttft = " / ".join(_f((cols.get(c) or {}).get("ttft_p50_s"), "{:.2f}") or "-"
                          for c in ("stock", "off", "on"))
        t_off, t_on = targets.get(w, (None, None))
        cell = [f"{_f(c['tok_s'])} (**{_x(c, st):.2f}x**)" if c and st else
                _f((c or {}).get("tok_s")) or "-" for c in (off, on)]
        lines.append(f"| {w} | {_f((st or {}).get('tok_s')) or '-'} | {cell[0]} | {cell[1]} | "
                     f"{reg} | {ttft} | {_verdict(_x(off, st), t_off)} | "
                     f"{_verdict(_x(on, st), t_on)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--notes", type=Path, default=None,
                    help="markdown appended to the tables: what the runs showed")
    a = ap.parse_args()
    off, on = offline(a.runs), online(a.runs)
    hetero = {w: off.pop(w) for w in [w for w in off if "ceiling" in off[w]]}
    gpus = sorted({c["gpu"] for rows in (off, on) for cols in rows.values()
                   for c in cols.values() if c.get("gpu")})
    w1 = on.get("W1-online", {})
    rereg = _x(w1.get("off-rereg"), w1.get("off-reg"))
    doc = {"commit": a.commit, "gpus": gpus, "offline": off, "heterogeneous": hetero,
           "online": on,
           "w1_online_after_reregistration_vs_fresh": rereg}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(doc, indent=1))
    md = [f"# Shared prompts nobody registered: stock vLLM and GraniKV ({a.name[:10]})", "",
          f"GPU: {', '.join(gpus) or 'none'}; code `{a.commit}`; Llama-3.1-8B shapes, dummy "
          "weights; every engine and server alone on the GPU, one after the other. "
          "Command: `OUT=DIR bash granikv_engine/bench/runs/unregistered.sh STEP` for each "
          "step, then `python -m granikv_engine.bench.unregistered_report --runs DIR "
          f"--out docs/benchmarks --name {a.name} --commit {a.commit}"
          + (f" --notes {a.notes}`." if a.notes else "`."), "",
          "\"Nothing registered\": the team context only at the start of every prompt (the "
          "system message online), no request arguments, as sent to stock. Implicit HOT "
          "on: `implicit_hot` true, `implicit_fraction` 1.0, the rest default. The ceiling "
          "column is the same engine with the context registered.", "",
          "## Offline (`LLM.generate`, 256 agents at once; W5: 8)", "",
          *table(off, OFFLINE_TARGETS), "",
          *(["## Heterogeneous agent traffic, nothing registered (offline)", "",
              *ceiling_table(hetero), ""] if hetero else []),
          "## Through `vllm serve` (streamed chats, `stream_interval` 1, closed loop)", "",
          *table(on, ONLINE_TARGETS), ""]
    if rereg is not None:
        md += [f"W1-online registered after W3-online registered `team0-context` with a "
               f"2K text (the id registered again, with 16K): "
               f"{w1['off-rereg']['tok_s']:,.0f} tok/s against {w1['off-reg']['tok_s']:,.0f} "
               f"on the fresh run on the same server: **{rereg:.3f}x** (target: within 5%).",
               ""]
    if a.notes is not None:
        md += [a.notes.read_text().rstrip(), ""]
    (a.out / f"{a.name}.md").write_text("\n".join(md))
    _plot(off, on, a.out / f"{a.name}.png", a.name)
    print("\n".join(md))


def _plot(off: dict[str, Any], on: dict[str, Any], path: Path, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = ("stock", "off", "on", "off-reg", "on-reg")
    names = ("stock", "implicit off", "implicit on", "registered (off)", "registered (on)")
    rows = [(f"{w}\n(offline)", c) for w, c in off.items()] + [(w, c) for w, c in on.items()]
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(rows)), 4))
    width = 0.16
    for k, (col, label) in enumerate(zip(cols, names, strict=True)):
        ax.bar([i + (k - 2) * width for i in range(len(rows))],
               [(c.get(col) or {}).get("tok_s", 0) for _, c in rows], width, label=label)
    ax.set_xticks(range(len(rows)), [w for w, _ in rows])
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"{name}: shared prompts nobody registered")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

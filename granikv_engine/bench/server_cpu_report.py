"""Table, plot and JSON of ``bench/server_cpu.py`` runs, side by side.

    python -m granikv_engine.bench.server_cpu_report --runs A.json B.json ... \\
        --out docs/benchmarks --name NAME --date YYYY-MM-DD --commit SHA --machine TEXT

writes NAME.md (CPU milliseconds per streamed token of each process, by run), NAME.json
(the runs) and NAME.png (one bar group per run). Runs that name their front-end
processes (``server_cpu.py --front``) get their sum, and its ratio to the ``stock`` side's
(``vllm serve``'s API server) at the same stream interval.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def front_ratio(run: dict[str, Any], runs: list[dict[str, Any]]) -> float | None:
    """``run``'s front-end CPU per token over the stock side's at its stream interval."""
    base = [r for r in runs if r.get("side") == "stock" and r.get("front")
            and r.get("stream_interval") == run.get("stream_interval")]
    if not run.get("front") or not base or not base[0]["front_net_ms_per_token"]:
        return None
    return float(run["front_net_ms_per_token"]) / float(base[0]["front_net_ms_per_token"])


def table(runs: list[dict[str, Any]]) -> str:
    names: list[str] = []
    for r in runs:
        names += [n for n in r["processes"] if n not in names]
    head = ("| run | tok/s | front end: ms CPU / token, net (x vllm serve) | "
            + " | ".join(f"{n}: ms CPU / token (net of idle)" for n in names) + " |")
    rows = [head, "|" + "---|" * (3 + len(names))]
    for r in runs:
        procs = r["processes"]
        cells = [f"{procs[n]['cpu_ms_per_token']} ({procs[n]['net_ms_per_token']})"
                 if n in procs else "-" for n in names]
        ratio = front_ratio(r, runs)
        front = ("-" if not r.get("front") else f"{r['front_net_ms_per_token']} "
                 f"({'+'.join(r['front'])}" + (f"; {ratio:.2f}x)" if ratio else ")"))
        rows.append(f"| {r['label']} | {r['summary']['output_tok_s']:,.0f} | {front} | "
                    + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    x = 0.0
    ticks, labels = [], []
    colors: dict[str, str] = {}  # one colour per process name across runs
    fronts = all(r.get("front") for r in runs)
    for r in runs:
        procs = r["processes"]
        if fronts:  # the front end only, one stacked bar a run (the engine is not compared)
            bottom = 0.0
            for name in r["front"]:
                value = procs[name]["net_ms_per_token"]
                color = colors.setdefault(name, f"C{len(colors)}")
                ax.bar(x, value, bottom=bottom, color=color, label=name)
                bottom += value
            ticks.append(x)
            x += 1.5
        else:
            for k, (name, p) in enumerate(procs.items()):
                color = colors.setdefault(name, f"C{len(colors)}")
                ax.bar(x + k, p["net_ms_per_token"], color=color, label=name)
            ticks.append(x + (len(procs) - 1) / 2)
            x += len(procs) + 1
        labels.append(r["label"].replace(", ", "\n"))
    handles, names = ax.get_legend_handles_labels()
    seen = dict(zip(names, handles))
    ax.legend(seen.values(), seen.keys(), fontsize=8)
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_ylabel("front end: CPU ms / token (net)" if fronts
                  else "CPU ms per streamed token (net of idle)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _repeats(runs: list[dict[str, Any]]) -> str:
    counts = sorted({int(r.get("repeat", 1)) for r in runs})
    return "once" if counts == [1] else f"{'/'.join(map(str, counts))} times"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--machine", required=True)
    a = p.parse_args(argv)
    runs = [json.loads(f.read_text()) for f in a.runs]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(
        {"date": a.date, "commit": a.commit, "machine": a.machine, "runs": runs}, indent=1))
    plot(runs, a.out / f"{a.name}.png")
    commands = "\n".join(f"- `{r['command']}`" for r in runs)
    (a.out / f"{a.name}.md").write_text(
        f"# CPU time per streamed token, by process ({a.date})\n\n"
        f"Machine: {a.machine}; commit `{a.commit}`. Each row: one server, one "
        f"closed-loop workload run unmeasured, then measured {_repeats(runs)}; CPU time "
        f"(user + system) of each process during a run, over the tokens streamed (each "
        f"process: its median run); in brackets, without the process's idle load "
        f"(measured just before). Front end: the sum of the named processes' net "
        f"figures, and its ratio to `vllm serve`'s API server at the same stream "
        f"interval.\n\n{table(runs)}\n\n![CPU per token]({a.name}.png)\n\n"
        f"Commands:\n\n{commands}\n")


if __name__ == "__main__":
    main()

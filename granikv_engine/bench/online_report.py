"""Tables of the online benchmark: stock vLLM, GraniKV inside vLLM, and the platform,
side by side per workload and load mode.

    python -m granikv_engine.bench.online_report --runs DIR [DIR...] --out docs/benchmarks \\
        --name 2026-12-01-online --gpu "NVIDIA H200" --commit SHA

Reads every ``online-*.json`` that ``bench.online`` wrote under the run folders and
writes ``NAME.json`` (the summary rows), ``NAME.md`` (the table and the commands) and
``NAME.png`` (output tokens/s and TTFT p50 per side).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

# the platform behind Serve's Python proxy ("platform") or its HAProxy ("platform-haproxy")
SIDES = ("stock", "granikv", "platform", "platform-haproxy")


def _read(path: Path) -> Any:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


def _find(d: Path, pattern: str) -> list[Path]:
    return sorted([*d.rglob(pattern), *d.rglob(pattern + ".gz")])


def load(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every workload run (``online-W*.json``, or gzipped) under ``dirs``."""
    runs = []
    for d in dirs:
        for path in _find(d, "online-W*.json"):
            run = _read(path)
            run["path"] = str(path)
            runs.append(run)
    return runs


def team_runs(dirs: list[Path]) -> list[dict[str, Any]]:
    """The agent team runs (``online-team-run.json``, bench/online_team.py)."""
    return [_read(p) for d in dirs for p in _find(d, "online-team-run.json")]


def side_of(run: dict[str, Any]) -> str:
    """A run's column: its side, the platform's by its front."""
    return "platform-haproxy" if run["side"] == "platform" and run.get(
        "front") == "haproxy" else str(run["side"])


def rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, mode, rate, stream interval, GPU): each side's tok/s, TTFT
    and ITL medians."""
    by_key: dict[tuple[str, str, Any, Any, str], dict[str, dict[str, Any]]] = {}
    for run in runs:
        key = (run["workload"], run["mode"], run.get("rate"), run.get("stream_interval"),
               run.get("gpu") or "")
        by_key.setdefault(key, {})[side_of(run)] = run
    out = []
    for (workload, mode, rate, interval, gpu), sides in sorted(by_key.items(),
                                                               key=lambda kv: str(kv[0])):
        def get(side: str, *path: str, sides: dict[str, Any] = sides) -> Any:
            node: Any = sides.get(side, {}).get("summary")
            for p in path:
                node = node.get(p) if isinstance(node, dict) else None
            return node

        row: dict[str, Any] = {"workload": workload, "mode": mode, "rate": rate,
                               "stream_interval": interval, "gpu": gpu}
        for side in SIDES:
            row[f"{side}_tok_s"] = get(side, "output_tok_s")
        row["ttft_p50_s"] = {s: get(s, "ttft_s", "p50") for s in SIDES}
        row["ttft_p90_s"] = {s: get(s, "ttft_s", "p90") for s in SIDES}
        row["itl_p50_s"] = {s: get(s, "itl_s", "p50") for s in SIDES}
        row["tpot_p50_s"] = {s: get(s, "tpot_s", "p50") for s in SIDES}
        row["errors"] = {s: get(s, "errors") for s in SIDES}
        # False: the time limit cut the run; its tok/s counts the tokens streamed by then
        row["complete"] = {s: get(s, "complete") for s in SIDES}
        row["tpot_p99_s"] = {s: get(s, "tpot_s", "p99") for s in SIDES}
        row["ttft_p99_s"] = {s: get(s, "ttft_s", "p99") for s in SIDES}
        row["requests"] = {s: sides[s]["requests"] for s in sides}
        stock, gk = row["stock_tok_s"], row["granikv_tok_s"]
        for side, name in (("platform", "platform"), ("platform-haproxy", "haproxy")):
            plat = row[f"{side}_tok_s"]
            row[f"{name}_vs_stock"] = plat / stock if plat and stock else None
            row[f"{name}_vs_granikv"] = plat / gk if plat and gk else None
        row["granikv_vs_stock"] = gk / stock if gk and stock else None
        out.append(row)
    return out


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _x(ratio: Any) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def table(summary: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    lines = [f"# Online: stock vLLM, GraniKV in vLLM, the platform ({summary['date']})", "",
             f"GPU: {summary['gpu']}; commit `{summary['commit']}`. Output tokens/s over the "
             "whole run (first request sent to last token); TTFT and inter-chunk latency "
             "medians as the client saw them. (cut): the time limit ended that run; its "
             "tok/s counts the tokens streamed by then.", "",
             "Platform: behind Serve's Python proxy / behind its HAProxy.", "",
             "| workload | load | stream interval | stock tok/s | GraniKV tok/s | platform "
             "tok/s (proxy / HAProxy) | platform / stock | platform / GraniKV | TTFT p50 "
             "stock / GraniKV / platform (s) | ITL p50 (ms) | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        load_ = "closed" if r["mode"] == "closed" else f"Poisson {r['rate']:g}/s"
        ttft = " / ".join(_f(r["ttft_p50_s"][s], ".2f") for s in SIDES)
        itl = " / ".join(_f(None if r["itl_p50_s"][s] is None else 1e3 * r["itl_p50_s"][s],
                            ".1f") for s in SIDES)
        errs = " / ".join(_f(r["errors"][s], "d") for s in SIDES)
        cut = r.get("complete", {})

        def tok(side: str, r: dict[str, Any] = r, cut: dict[str, Any] = cut) -> str:
            return _f(r[f"{side}_tok_s"], ",.0f") + (" (cut)" if cut.get(side) is False else "")
        both = " / ".join((_x(r["platform_vs_stock"]), _x(r["haproxy_vs_stock"])))
        both_gk = " / ".join((_x(r["platform_vs_granikv"]), _x(r["haproxy_vs_granikv"])))
        lines.append(f"| {r['workload']} | {load_} | {_f(r.get('stream_interval'), 'd')} | "
                     f"{tok('stock')} | {tok('granikv')} | {tok('platform')} / "
                     f"{tok('platform-haproxy')} | {both} | {both_gk} | {ttft} | {itl} | "
                     f"{errs} |")
    lines += ["", "Latency as the client saw it, per side (stock / GraniKV / platform behind "
              "the proxy / behind HAProxy): TTFT p50 and p99 (s), TPOT p50 and p99 (ms).", "",
              "| workload | load | stream interval | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 |",
              "|---|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        load_ = "closed" if r["mode"] == "closed" else f"Poisson {r['rate']:g}/s"

        def each(key: str, scale: float, fmt: str, r: dict[str, Any] = r) -> str:
            return " / ".join(_f(None if r[key][s] is None else scale * r[key][s], fmt)
                              for s in SIDES)
        lines.append(f"| {r['workload']} | {load_} | {_f(r.get('stream_interval'), 'd')} | "
                     f"{each('ttft_p50_s', 1, '.2f')} | {each('ttft_p99_s', 1, '.2f')} | "
                     f"{each('tpot_p50_s', 1e3, '.1f')} | {each('tpot_p99_s', 1e3, '.1f')} |")
    for t in summary.get("team_runs", []):
        lines += ["", f"Agent team run through the platform: {t['status']}, {t['turns']} turns "
                  f"of {t['agents']} agents in {t['wall_s']:.1f} s, HOT hits "
                  f"+{t['hot_hits_added']}."]
    lines += ["", "Commands:", ""]
    lines += [f"- `{c}`" for c in summary["commands"]]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = summary["rows"]
    labels = [f"{r['workload']}\n{r['mode']}" + (f", si {r['stream_interval']}"
                                                  if r.get("stream_interval") else "")
              for r in rs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.2
    for k, side in enumerate(SIDES):
        xs = [i + (k - 1.5) * width for i in range(len(rs))]
        a.bar(xs, [r[f"{side}_tok_s"] or 0 for r in rs], width, label=side)
        b.bar(xs, [r["ttft_p50_s"][side] or 0 for r in rs], width, label=side)
    for ax, title in ((a, "output tokens/s"), (b, "TTFT p50 (s)")):
        ax.set_xticks(range(len(rs)), labels)
        ax.set_title(title)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # room for the legend above the bars
        ax.legend(ncol=len(SIDES), fontsize=8, loc="upper center")
    fig.suptitle(f"Online, {summary['gpu']}, {summary['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", default="online-summary")
    p.add_argument("--gpu", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--date", default="")
    a = p.parse_args(argv)
    runs = load(a.runs)
    if not runs:
        raise SystemExit(f"no online-*.json under {a.runs}")
    teams = team_runs(a.runs)
    summary = {"gpu": a.gpu, "commit": a.commit, "date": a.date, "rows": rows(runs),
               "team_runs": teams,
               "commands": [r.get("command") for r in runs] + [t.get("command") for t in teams]}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(summary, indent=1))
    (a.out / f"{a.name}.md").write_text(table(summary, runs))
    plot(summary, a.out / f"{a.name}.png")
    print((a.out / f"{a.name}.md").read_text())


if __name__ == "__main__":
    main()

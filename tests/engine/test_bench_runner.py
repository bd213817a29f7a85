"""The benchmark runner's orchestration (no GPU, no vLLM): engines sharing the GPUs start
together and are timed one at a time, none shuts down while another is timed, and a peer
that dies does not hold the others up."""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import pytest

from granikv_engine.bench import run
from granikv_engine.bench.workloads import WORKLOADS

# A stand-in for bench/e2e.py: takes its turn, "times" for 0.3 s, logs what it did.
FAKE_E2E = """
import json, sys, time
from pathlib import Path
from granikv_engine.bench.e2e import end_turn, take_turn
a = sys.argv
sync, turn, peers = Path(a[a.index('--sync') + 1]), int(a[a.index('--turn') + 1]), \\
    int(a[a.index('--peers') + 1])
log = Path(a[a.index('--out') + 1]) / 'events.jsonl'
def say(what):
    with log.open('a') as f:
        f.write(json.dumps([turn, what, time.monotonic()]) + '\\n')
take_turn(sync, turn, peers)
say('start')
time.sleep(0.3)
say('end')
end_turn(sync, turn, peers)
say('exit')
"""


def _events(out: Path) -> dict[tuple[int, str], float]:
    rows = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return {(t, what): ts for t, what, ts in rows}


def test_shared_engines_are_timed_in_turn(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [sys.executable, "-c", FAKE_E2E]
    monkeypatch.setattr(run, "PHASES", {"a": fake, "b": fake, "c": fake})
    monkeypatch.setattr(run, "_wait_gpu_free", lambda: None)
    monkeypatch.setattr(sys, "argv", ["run", "--out", str(tmp_path), "--phases", "a~b~c",
                                      "--timeout", "60"])
    run.main()
    ev = _events(tmp_path)
    for t in (0, 1):  # each timed window ends before the next one starts
        assert ev[(t, "end")] <= ev[(t + 1, "start")]
    last_end = ev[(2, "end")]
    assert all(ev[(t, "exit")] >= last_end for t in range(3))  # nobody left early


def test_a_dead_peer_does_not_block_the_others(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake = [sys.executable, "-c", FAKE_E2E]
    dead = [sys.executable, "-c", "raise SystemExit(3)"]
    monkeypatch.setattr(run, "PHASES", {"dead": dead, "b": fake})
    monkeypatch.setattr(run, "_wait_gpu_free", lambda: None)
    monkeypatch.setattr(sys, "argv", ["run", "--out", str(tmp_path), "--phases", "dead~b",
                                      "--timeout", "60"])
    run.main()
    ev = _events(tmp_path)
    assert (1, "exit") in ev  # b ran its turn after the dead one and finished


def test_tensor_parallel_workloads_are_consistent() -> None:
    for name, w in WORKLOADS.items():
        if w.tp > 1:
            assert name.endswith(f"-TP{w.tp}") and w.model.startswith("qwen2.5")
            base = WORKLOADS[name.split("-")[0]]
            assert (w.prefix_lens, w.agents, w.suffix, w.output) == (
                base.prefix_lens, base.agents, base.suffix, base.output)
    for tp in (2, 4):
        phases = {p for p in run.PHASES if p.startswith(f"tp{tp}-")}
        assert phases == {f"tp{tp}-stock", f"tp{tp}-granikv"}


def test_stock_cascade_runs_the_model_runner_that_has_a_cascade() -> None:
    """vLLM 0.26's default (V2) model runner has no cascade attention; the attribution's
    stock-cascade engine must run the V1 runner, the others vLLM's default."""
    from granikv_engine.bench.e2e import engine_env, engine_kwargs

    assert engine_env("stock-cascade") == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert engine_env("stock") == {} and engine_env("granikv") == {}
    kw = engine_kwargs("stock-cascade", 4096, 0, async_sched=True, tiny=False)
    assert kw["disable_cascade_attn"] is False and kw["block_size"] == 16


def test_the_stockalloc_engine_differs_from_granikv_only_in_the_allocation_path() -> None:
    from granikv_engine.bench.e2e import engine_kwargs

    mine = engine_kwargs("granikv", 4096, 100, async_sched=True, tiny=False)
    other = engine_kwargs("granikv-stockalloc", 4096, 100, async_sched=True, tiny=False)
    a, b = mine["additional_config"]["granikv"], other["additional_config"]["granikv"]
    assert a.pop("fast_alloc") is True and b.pop("fast_alloc") is False
    assert a == b


def test_max_num_seqs_reaches_every_end_to_end_phase_only(tmp_path: Path) -> None:
    def cmd(phase: str, seqs: str) -> list[str]:
        return run._command(phase, argparse.Namespace(
            out=tmp_path, workloads="", kernel_budget="150", profile=False,
            profile_stack=False, hot_slots="", attribution="none", max_num_seqs=seqs))

    e2e = [p for p, c in run.PHASES.items() if "granikv_engine.bench.e2e" in c]
    assert {"stock", "granikv", "w2-stock", "w2-granikv", "tp2-stock"} <= set(e2e)
    for phase in e2e:
        c = cmd(phase, "256")
        assert c[c.index("--max-num-seqs") + 1] == "256" and c.count("--max-num-seqs") == 1
        assert "--max-num-seqs" not in cmd(phase, "")  # unset: each phase's own (512)
    for phase in ("tests", "kernels"):
        assert "--max-num-seqs" not in cmd(phase, "256")


def test_make_llm_passes_max_num_seqs_to_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from granikv_engine.bench import e2e

    seen: list[dict[str, object]] = []
    fake = types.ModuleType("vllm")
    fake.LLM = lambda **kw: seen.append(kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)
    e2e.make_llm("/tiny", "stock", 256, 0, True, {})
    e2e.make_llm("/tiny", "stock", 256, 0, True, {}, max_num_seqs=256)
    assert [kw["max_num_seqs"] for kw in seen] == [512, 256]


def test_the_agent_traffic_phases_run_w6_w7_with_their_ceiling_and_room_in_hot() -> None:
    def arg(phase: str, flag: str) -> str:
        cmd = run.PHASES[phase]
        return cmd[cmd.index(flag) + 1]

    assert arg("agents-stock", "--workloads") == arg("agents-granikv", "--workloads")
    assert arg("agents-stock", "--ceiling") == arg("agents-stock", "--workloads") == "W6,W7"
    # each workload's contexts fit the arena at once (one workload's at a time)
    need = max(sum(WORKLOADS[n].prefix_lens) for n in ("W6", "W7"))
    assert need <= int(arg("agents-granikv", "--hot-slots")) < need * 1.1

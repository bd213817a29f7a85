"""A GraniKV engine core in its own process does not outlive the process that started
it: killed outright (SIGKILL, as an OOM kill or ``ray.kill`` of a replica does), the
front end leaves no engine core and no worker behind. First the watch alone (a plain
child process), then a real vLLM engine core of the tiny model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "deploy" / "models" / "tiny-llama"

# a parent that starts a watched child, prints the child's pid, then waits to be killed
WATCHED = ("import os, time\n"
           "from granikv_engine.vllm_plugin.core.parent_watch import watch\n"
           "watch(os.getppid(), poll_s=0.1)\n"
           "time.sleep(600)\n")
PARENT = ("import subprocess, sys, time\n"
          f"child = subprocess.Popen([sys.executable, '-c', {WATCHED!r}])\n"
          "print(child.pid, flush=True)\n"
          "time.sleep(600)\n")

# a front end that starts a GraniKV engine (engine core and worker in processes of their
# own, as every vLLM front end does), prints their pids, then waits to be killed
FRONT_END = textwrap.dedent(f"""
    import os, sys, time
    from pathlib import Path
    from vllm import LLM
    llm = LLM(model={str(MODEL)!r}, load_format="dummy", skip_tokenizer_init=True,
              enforce_eager=True, max_model_len=512, dtype="float32", max_num_seqs=4,
              additional_config={{"granikv": {{"enabled": True, "hot_slots": 256}}}})

    def children(pid):
        kids = []
        for task in Path(f"/proc/{{pid}}/task").iterdir():
            kids += [int(k) for k in (task / "children").read_text().split()]
        return kids + [g for k in kids for g in children(k)]

    print("pids", *children(os.getpid()), flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; its new parent reaps it


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.time() + timeout
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]), "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_the_watch_ends_its_process_when_the_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.5)
    assert _alive(child)
    parent.kill()
    parent.wait()
    left = _wait_gone([child], timeout=10)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the child outlived its killed parent"


@pytest.mark.vllm
def test_a_killed_front_end_leaves_no_engine_core_behind() -> None:
    front = subprocess.Popen([sys.executable, "-c", FRONT_END], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert front.stdout is not None
    line = ""
    for line in front.stdout:  # vLLM logs to stdout too
        if line.startswith("pids "):
            break
    assert line.startswith("pids "), f"the engine did not start: {line!r}"
    pids = [int(p) for p in line.split()[1:]]
    names = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(
             errors="replace").strip() for p in pids if _alive(p)}
    assert any("EngineCore" in n for n in names.values()), names
    front.kill()  # SIGKILL: no shutdown code of the front end runs
    front.wait()
    left = _wait_gone(pids, timeout=60)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left behind: {[names.get(p, p) for p in left]}"

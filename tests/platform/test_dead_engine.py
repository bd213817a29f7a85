"""An engine that dies, and a replica killed outright, on two CPU engines of the tiny
model that share the machine, as two replicas share a node (no Ray: the replica's own
parts, ``engine_watch`` and ``engine_files``, around real vLLM engines).

- A front end killed with SIGKILL (``ray.kill`` of a replica) unlinks nothing: its
  engine's IPC socket files (and, under Ray, its /dev/shm segments) stay after its
  engine core and worker ended. The next replica to start removes them from the
  record, and leaves the live engine's files alone.
- An engine core killed under a stream: the stream ends with the dead engine's 503
  event (what an unstreamed request gets, as a status), not vLLM's 500; what the
  replica does before its process exits (shut the front end down, end the engine's
  worker, which outlives its engine core by seconds, remove the files) takes well under
  a second, and leaves no file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from granikv_platform.answers import public_sse
from granikv_platform.config import PlatformConfig
from granikv_platform.engine import EngineHost
from granikv_platform.engine_files import EngineFiles
from granikv_platform.engine_watch import DEAD_ENGINE, dead_answer, dead_stream
from granikv_platform.errors import REQUEST_ID
from granikv_platform.protocol import SseItem
from tests.conftest import REPO, app_args

pytestmark = [pytest.mark.vllm]

# A replica's start, without Ray: the engine, its files recorded (argv[2]), then it
# says which files and processes, and waits to be killed.
FRONT_END = """
import asyncio, json, sys
from pathlib import Path
from granikv_platform.config import PlatformConfig
from granikv_platform.engine import EngineHost
from granikv_platform.engine_files import EngineFiles
from tests.conftest import app_args

async def main() -> None:
    cfg = PlatformConfig.model_validate(app_args(Path(sys.argv[1])))
    before = EngineFiles.before()
    await EngineHost.start(cfg.engine_args(), None, cfg.engine.weight_seed, None,
                           cfg.frontend)
    files = EngineFiles.of_children(before, Path(sys.argv[2]))
    print("files", json.dumps({"files": sorted(files.files),
                               "pids": [p.pid for p in files.cores + files.workers]}),
          flush=True)
    await asyncio.sleep(600)

if __name__ == "__main__":
    asyncio.run(main())
"""
BODY = {"model": "tiny-llama", "prompt": "count: one two", "max_tokens": 64,
        "ignore_eos": True, "stream": True}


def killed_front_end(tmp: Path, records: Path) -> dict[str, Any]:
    """A front end started, then killed with SIGKILL; its files and engine processes."""
    (tmp / "front").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    front = subprocess.Popen([sys.executable, "-c", FRONT_END, str(tmp / "front"),
                              str(records)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    assert front.stdout is not None
    line = ""
    for line in front.stdout:  # vLLM logs to stdout too
        if line.startswith("files "):
            break
    assert line.startswith("files "), f"the engine did not start: {line!r}"
    started = json.loads(line[6:])
    os.kill(front.pid, signal.SIGKILL)
    front.wait()
    return started


def ended(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie"
               for p in pids):
            return True
        time.sleep(0.2)
    return False


async def scenario(tmp: Path) -> dict[str, Any]:
    records = tmp / "records"
    cfg = PlatformConfig.model_validate(app_args(tmp))
    before = EngineFiles.before()
    engine = await EngineHost.start(cfg.engine_args(), None, cfg.engine.weight_seed, None,
                                    cfg.frontend)
    files = EngineFiles.of_children(before, records)
    try:
        out: dict[str, Any] = {"live_files": set(files.files)}
        # a killed replica's engine, while this one runs
        killed = killed_front_end(tmp, records)
        assert ended(killed["pids"], 60), "the killed front end's engine lives on"
        out["killed_left"] = {f for f in killed["files"] if os.path.lexists(f)}
        out["removed"] = EngineFiles.remove_dead(records)
        out["killed_after"] = {f for f in killed["files"] if os.path.lexists(f)}
        out["live_after"] = {f for f in files.files if os.path.lexists(f)}

        # this engine's core killed under a stream, as the replica serves it
        items = engine.completions(BODY)
        assert isinstance(await anext(items), SseItem)
        files.cores[0].kill()
        t_kill = time.monotonic()
        rest = [item async for item in items]
        assert all(isinstance(item, SseItem) for item in rest), rest
        token = REQUEST_ID.set("rid-dead")
        try:  # what the replica (LLMReplica._serve) and its route send on
            out["event"] = "".join(public_sse(dead_stream(item, dead_answer(engine)).text
                                              if '{"error":' in item.text else item.text)
                                   for item in rest if isinstance(item, SseItem))
        finally:
            REQUEST_ID.reset(token)
        t_leave = time.monotonic()
        engine.shutdown()
        files.remove_left()
        out["leave_s"] = time.monotonic() - t_leave
        out["kill_to_gone_s"] = time.monotonic() - t_kill
        out["workers_running"] = [p.pid for p in files.workers if p.is_running()
                                  and p.status() != "zombie"]
        out["dead_left"] = {f for f in files.files if os.path.lexists(f)}
        out["records"] = sorted(p.name for p in records.glob("*.json"))
        return out
    finally:
        engine.shutdown()


def test_a_killed_replicas_files_go_and_a_dead_engines_stream_is_a_503(
        tmp_path: Path) -> None:
    out = asyncio.run(scenario(tmp_path))
    # the killed front end left its files (its IPC socket files; its segments too, where
    # no resource tracker outlives it to unlink them); the next start removed them all,
    # and none of the live engine's
    assert any(not f.startswith("/dev/shm/") for f in out["killed_left"]), out
    assert out["removed"] == len(out["killed_left"]) and not out["killed_after"], out
    kept = {f for f in out["live_files"] if "/sem." not in f}  # a lock's may be freed
    assert kept and kept <= out["live_after"], out
    # the stream the engine's death cut: the 503 event, with the request's id
    events = [e for e in out["event"].split("\n\n") if e.startswith('data: {"error"')]
    assert len(events) == 1, out["event"]
    err = json.loads(events[0][6:])["error"]
    assert err == {"message": DEAD_ENGINE, "type": "ServiceUnavailableError", "code": 503,
                   "request_id": "rid-dead"}, err
    assert out["event"].endswith("data: [DONE]\n\n")
    # then the replica's leaving: the worker ended, no file left, within a second
    assert out["leave_s"] < 1.0, out
    assert not out["workers_running"] and not out["dead_left"] and not out["records"], out
    print(f"dead engine: leave {out['leave_s']:.2f} s, kill to gone "
          f"{out['kill_to_gone_s']:.2f} s; killed front end: {out['removed']} files removed")

"""vLLM's workers' process group (``tcp://127.0.0.1:PORT``): rank 0's TCPStore listens on
127.0.0.1 with the plugin's rendezvous handler (``loopback_store.install``), on every
interface with torch's own. Each case in a fresh process: a process group is global."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

GROUP = """
import json, sys, psutil, torch.distributed as dist
from vllm.utils.network_utils import get_open_port
from granikv_engine.vllm_plugin import loopback_store
if sys.argv[1] == "plugin":
    loopback_store.install(); loopback_store.install()
dist.init_process_group("gloo", init_method=f"tcp://{sys.argv[2]}:{get_open_port()}",
                        rank=0, world_size=1)
dist.all_reduce(t := __import__("torch").ones(2))  # the group works
print("RESULT", json.dumps(sorted({c.laddr.ip for c in psutil.Process().net_connections("inet")
                                   if c.status == psutil.CONN_LISTEN})))
dist.destroy_process_group()
"""


def listen_ips(handler: str, host: str = "127.0.0.1") -> list[str]:
    proc = subprocess.run([sys.executable, "-c", GROUP, handler, host], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    return list(json.loads(line.removeprefix("RESULT ")))


@pytest.mark.parametrize("handler", ["torch", "plugin"])
def test_the_workers_store_listens_on_loopback_with_the_plugin(handler: str) -> None:
    ips = listen_ips(handler)
    assert ips, "no listening socket"
    if handler == "torch":
        assert "::" in ips  # torch's TCPStore: every interface, whatever the host
    else:
        assert set(ips) <= {"127.0.0.1"}, ips

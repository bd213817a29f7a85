"""A GraniKV engine core in its own process exits when the process that started it dies.

vLLM's workers watch their engine core (a pipe that closes when it dies), but the engine
core does not watch the front end that started it. When that process is killed outright
(SIGKILL: the kernel's OOM killer, ``ray.kill`` of a Serve replica, ``ray stop
--force``), the engine core lives on as an orphan, holding its memory: on a GPU, the
memory that the replica started in its place needs. So, with GraniKV enabled, the
engine core's busy loop (``EngineCoreProc.run_busy_loop``, and the data-parallel
one's; never an in-process engine) first starts a thread that polls the parent's pid,
as ``multiprocessing`` recorded it when the process was started. When the process is
re-parented, the thread sends it SIGTERM, which vLLM's engine core handles as a
shutdown (its workers follow through their pipes), and SIGKILL if it is still there
``grace_s`` later. (The loop, not ``__init__``: vLLM loads the plugin in the engine
core's process from inside ``EngineCore.__init__``, too late to wrap the constructor
already running; the loop is looked up on the class after that.)
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

POLL_S = 1.0
GRACE_S = 30.0


def watch(parent: int, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> threading.Thread:
    """Shut this process down once its parent is no longer ``parent``."""
    def run() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        logger.error("GraniKV: the process that started this engine core (pid %d) is "
                     "gone; shutting the engine core down", parent)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=run, name="granikv-parent-watch", daemon=True)
    thread.start()
    return thread


def install() -> None:
    import vllm.v1.engine.core as core

    for cls in (core.EngineCoreProc, core.DPEngineCoreProc):
        if "run_busy_loop" in vars(cls) and not vars(cls).get("_granikv_parent_watch"):
            _wrap(cls)


def _wrap(cls: Any) -> None:
    from granikv_engine.vllm_plugin.enable import granikv_config

    stock = cls.run_busy_loop

    @functools.wraps(stock)
    def run_busy_loop(self: Any) -> None:
        parent = multiprocessing.parent_process()  # its pid as of this process's start
        if parent is not None and granikv_config(self.vllm_config) is not None:
            watch(parent.pid)  # type: ignore[arg-type]
        stock(self)

    cls.run_busy_loop = run_busy_loop
    cls._granikv_parent_watch = True

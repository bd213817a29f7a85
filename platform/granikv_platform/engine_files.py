"""What an engine's processes leave on the machine, and its removal once they are gone."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile

import psutil

logger = logging.getLogger("ray.serve")


class EngineFiles:
    """The shared-memory files (/dev/shm: multiprocessing's psm_* segments, sem.*
    semaphores) that the engine's processes (engine core, workers: this replica's
    children) map, and vLLM's ZMQ IPC socket files in the temp folder: those that this
    process and those children bind once the engine started, and those that appeared
    meanwhile and that no socket is bound to any more (the start-up handshake's).
    vLLM's engine core does not unlink its broadcast queue's segment when it exits
    (160 MiB on CPU), the IPC socket files stay after their sockets close, and a killed
    process unlinks nothing: once those processes are gone, ``remove_left`` removes
    what is left."""

    def __init__(self, procs: list[psutil.Process], paths: set[str],
                 sockets: set[str]) -> None:
        self.procs = procs
        self.paths = paths
        self.sockets = sockets

    @staticmethod
    def socket_files() -> set[str]:
        """Socket files directly in the temp folder (where vLLM puts its IPC sockets)."""
        tmp = tempfile.gettempdir()
        out = set()
        with contextlib.suppress(OSError), os.scandir(tmp) as entries:
            for e in entries:
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                        out.add(e.path)
        return out

    @classmethod
    def of_children(cls, sockets_before: set[str]) -> EngineFiles:
        """``sockets_before``: ``socket_files()`` before the engine started."""
        procs, paths = [], set()
        for p in psutil.Process().children(recursive=True):
            try:
                mapped = {m.path for m in p.memory_maps(grouped=True)
                          if m.path.startswith("/dev/shm/")}
            except psutil.Error:  # exited meanwhile
                continue
            if mapped:  # not, e.g., multiprocessing's resource tracker
                procs.append(p)
                paths |= mapped
        tmp = tempfile.gettempdir()
        own: set[str] = set()
        for p in [psutil.Process(), *procs]:
            with contextlib.suppress(psutil.Error):
                own |= {c.laddr for c in p.net_connections(kind="unix")
                        if isinstance(c.laddr, str) and os.path.dirname(c.laddr) == tmp}
        bound = _bound_unix_paths()
        closed = set() if bound is None else cls.socket_files() - sockets_before - bound
        return cls(procs, paths, own | closed)

    def remove_left(self, wait_s: float = 5.0) -> None:
        _, alive = psutil.wait_procs(self.procs, timeout=wait_s)
        if alive:  # still running: their files are still theirs
            logger.warning("GraniKV: engine processes %s still run; their shared memory "
                           "stays", [p.pid for p in alive])
            return
        for path in sorted(self.paths | self.sockets):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                logger.info("GraniKV: removed %s, left by the engine's processes", path)


def _bound_unix_paths() -> set[str] | None:
    """Paths of the Unix sockets bound on this machine (the kernel's list); None where
    there is no such list (not Linux: every socket file is kept)."""
    try:
        with open("/proc/net/unix") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    return {cols[7] for cols in (r.split() for r in rows) if len(cols) > 7}

"""What an engine's processes leave on the machine, and its removal once they are gone:
by the replica that started them when it stops, or, when that replica was killed, by
the next replica that starts on the node, from a record of whose files they are."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

logger = logging.getLogger("ray.serve")

RECORDS_DIR = "granikv-engine-files"  # in the temp folder: one record per started engine
# A dead engine core's workers notice through a pipe and take seconds to end (4.4 to
# more than 5 s measured on CPU); they serve nothing, so they get this long, then SIGKILL.
ORPHAN_GRACE_S = 0.05


# How long a file still bound after the engine's processes ended is waited for: the
# sockets of a worker killed just now can stay in the kernel's list for a moment (in one
# whole-suite run, two ZMQ socket files 2 ms after the kill).
UNBIND_WAIT_S = 0.5


class EngineFiles:
    """The shared-memory files (/dev/shm: multiprocessing's psm_* segments, sem.*
    semaphores) that the engine's processes (engine core, workers: this replica's
    children) map, and vLLM's ZMQ IPC socket files in the temp folder: those that this
    process and those children bind once the engine started, and those that appeared
    meanwhile and that no socket is bound to any more (the start-up handshake's).
    vLLM's engine core does not unlink its broadcast queues' segments when it exits
    (160 and 240 MiB on CPU), the IPC socket files stay after their sockets close, and a
    killed process unlinks nothing: once those processes are gone, ``remove_left``
    removes what is left. ``of_children`` also writes a record of the files and of the
    processes they belong to (this one included, with their start times, so that a
    reused pid is not taken for them), and ``remove_dead``, in a replica that starts,
    removes the files of every record whose processes have all ended: what the engines
    of killed replicas left. A record with a process still running is left alone."""

    def __init__(self, cores: list[psutil.Process], workers: list[psutil.Process],
                 files: set[str], record: Path | None = None) -> None:
        self.cores = cores  # engine cores: this process's children
        self.workers = workers  # their workers
        self.files = files
        self.record = record

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
    def before(cls) -> Before:
        """What is there before an engine starts: ``of_children`` takes what is new."""
        return Before(cls.socket_files(), {p.pid for p in psutil.Process().children()})

    @classmethod
    def of_children(cls, before: Before, records: Path | None = None) -> EngineFiles:
        """The files of the engine this process started since ``before`` (``before()``):
        those of the children it started meanwhile and their descendants (not those of
        a child it had already, such as a local Ray cluster's processes in a driver).
        The record goes to ``records`` (default ``records_dir()``)."""
        procs, paths = [], set()
        for p in _started_since(before.children):
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
        closed = set() if bound is None else cls.socket_files() - before.sockets - bound
        me = os.getpid()
        cores = [p for p in procs if _ppid(p) == me]
        files = paths | own | closed
        record = write_record(records or records_dir(), [psutil.Process(), *procs], files)
        return cls(cores, [p for p in procs if p not in cores], files, record)

    def remove_left(self, wait_s: float = 5.0) -> None:
        """Once the engine cores ended (within ``wait_s``), their workers too (killed
        after ``ORPHAN_GRACE_S``), remove the files, and the record once none is left
        (what another process still uses goes when the next replica starts after this
        one ended: ``remove_dead``). The engine's front end in this process is shut
        down: the socket files it still binds are removed too."""
        if _wait_ended(self.cores, wait_s):  # still running: their files are still theirs
            logger.warning("GraniKV: engine processes %s still run; their shared memory "
                           "stays", [p.pid for p in self.cores])
            return
        left = _wait_ended(self.workers, ORPHAN_GRACE_S)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        if _wait_ended(left, 2.0):
            logger.warning("GraniKV: engine workers %s outlive their engine core; their "
                           "shared memory stays", [p.pid for p in left])
            return
        if left:
            logger.info("GraniKV: killed the workers %s of an engine core that ended",
                        [p.pid for p in left])
        remove(self.files, bound_here_too=True)
        left_files = [f for f in self.files if os.path.lexists(f)]
        deadline = time.monotonic() + UNBIND_WAIT_S
        while left_files and time.monotonic() < deadline:  # a killed worker's sockets
            time.sleep(0.02)  # leave the kernel's list a moment after the process ends
            remove(self.files, bound_here_too=True)
            left_files = [f for f in self.files if os.path.lexists(f)]
        if left_files:  # the record stays: the next replica's remove_dead finishes
            logger.warning("GraniKV: %d of the engine's files are still in use: %s",
                           len(left_files), left_files)
        elif self.record is not None:
            with contextlib.suppress(OSError):
                self.record.unlink()

    @staticmethod
    def remove_dead(records: Path | None = None, wait_s: float = 0.0) -> int:
        """Remove the files of every record (in ``records``, default ``records_dir()``)
        whose processes have all ended, and the record; the number of files removed.
        ``wait_s``: first wait up to that long for every recorded process to end (a
        local cluster that stopped: its replicas and engines are ending)."""
        folder = records or records_dir()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(
                _dead_record_files(p) is None for p in folder.glob("*.json")):
            time.sleep(0.2)
        removed = 0
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(folder.glob("*.json")):
                files = _dead_record_files(path)
                if files is None:
                    continue
                removed += remove(files, "left by the engine of a replica that was killed")
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return removed


@dataclass(frozen=True)
class Before:
    """Socket files in the temp folder, and this process's children, before an engine
    started."""

    sockets: set[str]
    children: set[int]


def _started_since(children_before: set[int]) -> list[psutil.Process]:
    """This process's children not in ``children_before``, and all their descendants."""
    out: list[psutil.Process] = []
    for child in psutil.Process().children():
        if child.pid in children_before:
            continue
        out.append(child)
        with contextlib.suppress(psutil.Error):
            out.extend(child.children(recursive=True))
    return out


def records_dir() -> Path:
    return Path(tempfile.gettempdir()) / RECORDS_DIR


def write_record(folder: Path, procs: list[psutil.Process], files: set[str]) -> Path | None:
    """A record of ``files`` and the processes that use them, written whole (a new name,
    then renamed); None where it cannot be written (the files are then removed only by
    this replica)."""
    try:
        owners = [[p.pid, p.create_time()] for p in procs]
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"{os.getpid()}-{time.time_ns()}.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps({"owners": owners, "files": sorted(files)}))
        part.replace(path)
        return path
    except (OSError, psutil.Error) as e:
        logger.warning("GraniKV: no record of the engine's files (%s): a killed replica's "
                       "would stay", e)
        return None


def remove(files: set[str], why: str = "left by the engine's processes",
           bound_here_too: bool = False) -> int:
    """Unlink what ``files`` names that is still there: a segment or semaphore directly
    in /dev/shm, or a socket file directly in the temp folder that no socket is bound
    to (none where the kernel does not list bound sockets; ``bound_here_too``: none
    but this process's own, whose engine front end is shut down); nothing else,
    whatever a record says. The number removed."""
    tmp, bound = tempfile.gettempdir(), _bound_unix_paths()
    if bound is not None and bound_here_too:
        bound -= _bound_here()
    n = 0
    for path in sorted(files):
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        where = os.path.dirname(path)
        ours = (where == "/dev/shm" and stat.S_ISREG(mode)) or (
            where == tmp and stat.S_ISSOCK(mode) and bound is not None
            and path not in bound)
        if not ours:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            n += 1
            logger.info("GraniKV: removed %s, %s", path, why)
    return n


def _dead_record_files(path: Path) -> set[str] | None:
    """The files of the record at ``path`` when every process it names has ended, else
    None (also for a record that does not parse: left as it is)."""
    try:
        record = json.loads(path.read_text())
        owners = [(int(pid), float(started)) for pid, started in record["owners"]]
        files = {str(f) for f in record["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if any(_running(pid, started) for pid, started in owners) else files


def _running(pid: int, started: float) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (a zombie has
    ended; a pid reused by a later process is not it)."""
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - started) < 0.05 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.Error:  # not ours to read: taken as running
        return True


def _wait_ended(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after up to ``timeout_s`` (a zombie has ended:
    the engine core's workers are reaped by whoever adopts them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in procs if _running(p.pid, p.create_time())]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def _ppid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _bound_here() -> set[str]:
    """Paths of the Unix sockets this process binds."""
    with contextlib.suppress(psutil.Error):
        return {c.laddr for c in psutil.Process().net_connections(kind="unix")
                if isinstance(c.laddr, str) and c.laddr}
    return set()


def _bound_unix_paths() -> set[str] | None:
    """Paths of the Unix sockets bound on this machine (the kernel's list); None where
    there is no such list (not Linux: every socket file is kept)."""
    try:
        with open("/proc/net/unix") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    return {cols[7] for cols in (r.split() for r in rows) if len(cols) > 7}

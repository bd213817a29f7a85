"""The files an engine's processes leave, removed by the next replica from the records
(``EngineFiles.remove_dead``), with real processes: a holder maps a file in /dev/shm and
binds a Unix socket in the temp folder, as an engine core does. Only the files of a
record whose processes have all ended go; a live holder's stay, and so do those of a
record with one process still running (an engine core that outlives its killed
replica), a socket that something binds again and whatever is not a /dev/shm file or a
socket directly in the temp folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from granikv_platform.engine_files import EngineFiles, write_record

# maps /dev/shm/<argv[1]> (1 MiB) and binds <argv[2]>, says so, then waits to be killed
HOLDER = """
import mmap, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 1 << 20)
segment = mmap.mmap(fd, 1 << 20)
sock = socket.socket(socket.AF_UNIX)
sock.bind(sys.argv[2])
sock.listen()
print("ready", flush=True)
time.sleep(600)
"""


class Holder:
    """A process that holds a segment and a socket file, as an engine's do."""

    def __init__(self, tmp: Path) -> None:
        self.segment = f"/dev/shm/gkvt-{uuid.uuid4().hex[:12]}"
        self.socket = str(tmp / uuid.uuid4().hex[:12])
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, self.segment,
                                      self.socket], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"
        self.process = psutil.Process(self.proc.pid)

    @property
    def files(self) -> set[str]:
        return {self.segment, self.socket}

    def left(self) -> set[str]:
        return {f for f in self.files if os.path.lexists(f)}

    def kill(self) -> None:  # SIGKILL: the holder unlinks nothing
        self.proc.kill()
        self.proc.wait()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in self.left():
            os.unlink(f)


@pytest.fixture
def tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp folder of the test's own, as ``tempfile.gettempdir()`` (short: socket
    paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="gkvt-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    for p in sorted(path.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    path.rmdir()


@pytest.fixture
def holders(tmp: Path) -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        h.cleanup()


def test_the_files_of_ended_processes_go_and_no_others(tmp: Path,
                                                       holders: list[Holder]) -> None:
    records = tmp / "records"
    dead, live, outlived, replica, decoy = (Holder(tmp) for _ in range(5))
    holders += [dead, live, outlived, replica, decoy]
    write_record(records, [dead.process], dead.files)
    write_record(records, [live.process], live.files)
    # a killed replica whose engine core still runs: its record names both
    write_record(records, [replica.process, outlived.process],
                 outlived.files | replica.files)
    # a record naming what is no engine's file: a file in a subfolder, a regular file
    # in the temp folder, the decoy's socket (bound again by the live decoy)
    (tmp / "sub").mkdir()
    (tmp / "sub" / "kept.txt").write_text("x")
    (tmp / "kept.txt").write_text("x")
    gone = Holder(tmp)
    holders.append(gone)
    strays = {str(tmp / "sub" / "kept.txt"), str(tmp / "kept.txt"), decoy.socket}
    write_record(records, [gone.process], gone.files | strays)
    for h in (dead, replica, gone):
        h.kill()

    removed = EngineFiles.remove_dead(records)
    assert removed == 4 and not dead.left() and not gone.left()
    assert live.left() == live.files and outlived.left() == outlived.files
    assert replica.left() == replica.files and decoy.left() == decoy.files
    assert all(os.path.exists(p) for p in strays)
    assert len(list(records.glob("*.json"))) == 2  # the live ones' records stay

    outlived.kill()  # the engine core ends at last: the next start removes its files
    assert EngineFiles.remove_dead(records) == 4
    assert not outlived.left() and not replica.left()
    assert len(list(records.glob("*.json"))) == 1 and live.left() == live.files


def test_a_reused_pid_is_not_the_recorded_process(tmp: Path, holders: list[Holder]) -> None:
    """A record names each process by pid and start time: another process that got the
    pid since (here: this test's own process, recorded with another start time) is not
    the one that held the files."""
    records = tmp / "records"
    dead = Holder(tmp)
    holders.append(dead)
    path = write_record(records, [dead.process], dead.files)
    assert path is not None
    dead.kill()
    me = psutil.Process()
    path.write_text(path.read_text().replace(
        f"[{dead.process.pid}, ", f"[{me.pid}, ").replace(
        str(dead.process.create_time()), str(me.create_time() - 100)))
    assert str(me.pid) in path.read_text()
    assert EngineFiles.remove_dead(records) == 2 and not dead.left()
    live = Holder(tmp)  # the same with the start time right: running, kept
    holders.append(live)
    write_record(records, [me, live.process], live.files)
    assert EngineFiles.remove_dead(records) == 0 and live.left() == live.files


def test_only_the_processes_started_since_before_are_the_engines(
        tmp: Path, holders: list[Holder]) -> None:
    """A process that had children before its engine started (a driver of a local Ray
    cluster, whose raylet maps /dev/shm) takes only the new ones for its engine's: their
    files are recorded, and the older child is neither recorded nor taken for an engine
    core (which the replica's leaving would wait for, and a test would kill)."""
    older = Holder(tmp)
    holders.append(older)
    before = EngineFiles.before()
    engine = Holder(tmp)
    holders.append(engine)
    files = EngineFiles.of_children(before, tmp / "records")
    assert [p.pid for p in files.cores] == [engine.proc.pid] and not files.workers
    assert engine.segment in files.files and not older.files & files.files, files.files
    assert files.record is not None
    owners = [pid for pid, _ in json.loads(files.record.read_text())["owners"]]
    assert owners == [os.getpid(), engine.proc.pid], owners


def test_leaving_removes_the_sockets_this_process_still_binds(
        tmp: Path, holders: list[Holder]) -> None:
    """A replica that leaves: its engine core ended, and its own front end (shut down)
    may still bind its IPC socket files; they go with the core's files and the record.
    A file another live process still binds stays, and so does the record, for the
    next replica's ``remove_dead``."""
    import socket

    core, other = Holder(tmp), Holder(tmp)
    holders += [core, other]
    front = socket.socket(socket.AF_UNIX)
    path = str(tmp / uuid.uuid4().hex[:12])
    front.bind(path)
    front.listen()
    try:
        record = write_record(tmp / "records", [psutil.Process(), core.process],
                              core.files | {path})
        core.kill()
        EngineFiles([core.process], [], core.files | {path}, record).remove_left(1.0)
        assert not core.left() and not os.path.lexists(path)
        assert record is not None and not record.exists()

        record = write_record(tmp / "records", [psutil.Process()], other.files)
        EngineFiles([], [], other.files, record).remove_left(1.0)
        assert other.left() == {other.socket}  # bound by a live process: kept
        assert record is not None and record.exists()
    finally:
        front.close()


def test_a_stopping_cluster_waits_for_its_engines_then_removes_their_files(
        tmp: Path, holders: list[Holder]) -> None:
    """``granikv run``'s stop: a replica cut short left its record, and its processes
    end only after Ray stopped. ``remove_dead(wait_s=...)`` waits for them, then removes
    their files; without the wait the record is still live and nothing goes."""
    import threading

    records = tmp / "records"
    ending = Holder(tmp)
    holders.append(ending)
    write_record(records, [ending.process], ending.files)
    assert EngineFiles.remove_dead(records) == 0 and ending.left() == ending.files
    timer = threading.Timer(0.5, ending.kill)
    timer.start()
    try:
        assert EngineFiles.remove_dead(records, wait_s=10.0) == 2
    finally:
        timer.join()
    assert not ending.left() and not list(records.glob("*.json"))

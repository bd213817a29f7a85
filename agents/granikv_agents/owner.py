"""One executor per run store: an exclusive lock on ``<store>.lock``.

An executor resumes the runs that a dead predecessor left "running". Two live executors
on one file would each resume the other's runs, and run their turns twice. So opening a
store takes an exclusive ``flock``. The kernel releases the lock when its process dies,
so a replica that Serve starts after a crash gets it at once. A replica that starts
while the old one drains (a rolling update) waits for it, up to ``wait_s``.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from typing import IO


class StoreBusy(RuntimeError):
    """Another live executor owns the run store."""


class StoreOwner:
    def __init__(self, handle: IO[str], path: str) -> None:
        self._handle = handle
        self.path = path

    @classmethod
    async def acquire(cls, store_path: str, wait_s: float = 60.0) -> StoreOwner:
        path = f"{store_path}.lock"
        handle = open(path, "a+")  # noqa: SIM115  (held until release)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    handle.close()
                    raise StoreBusy(f"the run store {store_path} is owned by another "
                                    f"executor (pid {holder})") from None
                await asyncio.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        return cls(handle, path)

    def release(self) -> None:
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()

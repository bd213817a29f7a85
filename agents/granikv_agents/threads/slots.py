"""RunSlots: one run per thread at a time; runs enqueued behind it start in order.

A thread's key is its checkpoint thread (``ThreadRecord.checkpoint_thread``). Each run
is an asyncio task of ``start(run, team, resumed)`` (the executor's), which calls
``done(run)`` when it ends: the thread's next queued run then starts, unless the slots
are closed (the executor is stopping: queued runs stay pending for the next one).

Admission to a thread is one critical section (``admission(key)``, an asyncio lock per
thread): whoever holds it reads the thread's slot, writes the run to the store and
submits it before the next admission reads the slot, so two runs never both see an idle
thread. A task is cancelled at most once (``interrupt``): a second interrupter waits for
the first's cancellation to end instead of cancelling the run's own end (its store
writes) again.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from granikv_agents.team import Team
from granikv_agents.threads.store import ThreadRun, checkpoint_thread

Start = Callable[[ThreadRun, Team, bool], Coroutine[Any, Any, None]]


def key_of(run: ThreadRun) -> str:
    return checkpoint_thread(run.team, run.thread_id)


class RunSlots:
    def __init__(self, start: Start) -> None:
        self._start = start
        self._tasks: dict[str, asyncio.Task[None]] = {}  # run id -> its task
        self._running: dict[str, str] = {}  # thread key -> its running run
        self._queued: dict[str, list[tuple[ThreadRun, Team]]] = {}  # in order
        self._interrupted: set[str] = set()  # run ids whose task was cancelled by a client
        # thread key -> its admission lock, alive while someone holds or awaits it
        self._admitting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())
        self._closed = False

    def admission(self, key: str) -> asyncio.Lock:
        """The thread's admission lock: held from reading its slot to ``submit``."""
        lock = self._admitting.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._admitting[key] = lock
        return lock

    def running(self, key: str) -> str | None:
        return self._running.get(key)

    def task(self, run_id: str) -> asyncio.Task[None] | None:
        return self._tasks.get(run_id)

    def live(self, run_id: str) -> bool:
        """Running, or queued behind another run of its thread."""
        return run_id in self._tasks or any(
            r.run_id == run_id for q in self._queued.values() for r, _ in q)

    def submit(self, run: ThreadRun, team: Team, resumed: bool) -> None:
        key = key_of(run)
        if key in self._running:
            self._queued.setdefault(key, []).append((run, team))
        else:
            self._launch(run, team, resumed)

    def interrupt(self, run_id: str) -> asyncio.Task[None] | None:
        """Cancel the run's task, once (a client's interruption: the run ends
        ``interrupted``); the task to wait for, None if it is not running."""
        task = self._tasks.get(run_id)
        if task is not None and run_id not in self._interrupted:
            self._interrupted.add(run_id)
            task.cancel()
        return task

    def interrupted(self, run_id: str) -> bool:
        return run_id in self._interrupted

    def unqueue(self, run: ThreadRun) -> bool:
        """Take ``run`` out of its thread's queue; whether it was there."""
        queue = self._queued.get(key_of(run), [])
        kept = [(r, t) for r, t in queue if r.run_id != run.run_id]
        found = len(kept) < len(queue)
        queue[:] = kept
        return found

    def drop_queue(self, key: str) -> list[ThreadRun]:
        return [r for r, _ in self._queued.pop(key, [])]

    def done(self, run: ThreadRun) -> None:
        """``run`` ended: its thread's next queued run starts."""
        key = key_of(run)
        self._tasks.pop(run.run_id, None)
        self._interrupted.discard(run.run_id)
        self._running.pop(key, None)
        queue = self._queued.get(key)
        if queue and not self._closed:
            following, team = queue.pop(0)
            self._launch(following, team, resumed=False)
        if not queue:
            self._queued.pop(key, None)

    def close(self) -> list[asyncio.Task[None]]:
        """No queued run starts any more; the running ones' tasks are cancelled (those a
        client interrupted already are not cancelled again) and returned."""
        self._closed = True
        for run_id, task in self._tasks.items():
            if run_id not in self._interrupted:
                task.cancel()
        return list(self._tasks.values())

    def _launch(self, run: ThreadRun, team: Team, resumed: bool) -> None:
        self._running[key_of(run)] = run.run_id
        self._tasks[run.run_id] = asyncio.create_task(
            self._start(run, team, resumed), name=f"granikv-thread-run-{run.run_id}")

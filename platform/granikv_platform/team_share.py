"""Each team's bounded share of one replica's engine (``limits.team_max_sequences``,
``limits.team_max_queued``), so that no team can fill the engine's batch or its queue.

A request holds ``sequences(body)`` of its team's share from admission until its answer
has ended (a stream included, read by its client or not: an unread stream still holds
its team's share). A request that does not fit waits in its team's own FIFO queue; a
release admits the waiting requests of that team, in order, while they fit. One team's
queue never waits for another team: the others' requests are admitted at once while
their own share has room, and since each share is at most part of the engine's batch
(``max_num_seqs``), a light team finds a free place in the batch while a heavy one is
at its cap. Over the queue's bound the request is refused at once (429, ``ShareFull``);
a request larger than its team's whole share could never be admitted (400,
``ShareTooLarge``). A waiter that is cancelled (its client left, its first answer timed
out) leaves the queue, and the share it had been granted meanwhile is given back.

Pure asyncio: one instance per replica, used from its event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from granikv_platform.config import PlatformConfig


@dataclass(frozen=True, slots=True)
class ShareLimits:
    max_sequences: int  # in-flight sequences of one team on one replica
    max_queued: int  # requests of one team waiting for its share


class ShareFull(Exception):
    """The team's share and its queue are full: retry later (HTTP 429)."""

    def __init__(self, team: str, limits: ShareLimits) -> None:
        super().__init__(
            f"team {team!r} has {limits.max_sequences} sequences in flight on this replica "
            f"(limits.team_max_sequences) and {limits.max_queued} requests waiting "
            f"(limits.team_max_queued); retry later")


class ShareTooLarge(ValueError):
    """A request that asks for more sequences than its team's whole share (HTTP 400)."""

    def __init__(self, team: str, asked: int, limits: ShareLimits) -> None:
        super().__init__(
            f"the request asks for {asked} sequences (n, best_of, prompts); team {team!r} "
            f"may have {limits.max_sequences} in flight (limits.team_max_sequences)")


def sequences(body: Mapping[str, Any]) -> int:
    """The engine sequences a chat or completion body makes: ``max(n, best_of)`` for
    each of its prompts (a completion's ``prompt`` may be a batch)."""
    choices = max(_count(body.get("n")), _count(body.get("best_of")))
    return choices * _prompts(body.get("prompt"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def _prompts(prompt: Any) -> int:
    """A string or a list of token ids is one prompt; a list of them, one each."""
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    return 1


@dataclass(slots=True)
class _Waiter:
    sequences: int
    granted: asyncio.Future[None]


@dataclass(slots=True)
class _Team:
    held: int = 0  # sequences admitted and not yet released
    queue: deque[_Waiter] = field(default_factory=deque)


def share_limits(cfg: PlatformConfig, max_num_seqs: int
                 ) -> tuple[ShareLimits, dict[str, ShareLimits]]:
    """The default limits (``limits``; half the engine's ``max_num_seqs`` unless set)
    and each team's own (``teams[].max_sequences``, ``max_queued``)."""
    lim = cfg.limits
    default = ShareLimits(lim.team_max_sequences or max(1, max_num_seqs // 2),
                          lim.team_max_queued)
    return default, {t.name: ShareLimits(t.max_sequences or default.max_sequences,
                                         default.max_queued if t.max_queued is None
                                         else t.max_queued)
                     for t in cfg.teams if t.max_sequences or t.max_queued is not None}


class TeamShare:
    def __init__(self, default: ShareLimits,
                 per_team: Mapping[str, ShareLimits] | None = None) -> None:
        self.default = default
        self.per_team = dict(per_team or {})
        self._teams: dict[str, _Team] = {}
        self.refused = 0  # requests answered ShareFull, since start

    def limits(self, team: str) -> ShareLimits:
        return self.per_team.get(team, self.default)

    @asynccontextmanager
    async def hold(self, team: str, asked: int) -> AsyncIterator[None]:
        """Holds ``asked`` sequences of ``team``'s share for the body of the block."""
        await self.acquire(team, asked)
        try:
            yield
        finally:
            self.release(team, asked)

    async def acquire(self, team: str, asked: int) -> None:
        """Returns once admitted; ShareFull / ShareTooLarge at once when it cannot be."""
        limits = self.limits(team)
        if asked > limits.max_sequences:
            raise ShareTooLarge(team, asked, limits)
        state = self._teams.setdefault(team, _Team())
        if not state.queue and state.held + asked <= limits.max_sequences:
            state.held += asked
            return
        if len(state.queue) >= limits.max_queued:
            self.refused += 1
            raise ShareFull(team, limits)
        waiter = _Waiter(asked, asyncio.get_running_loop().create_future())
        state.queue.append(waiter)
        try:
            await waiter.granted
        except BaseException:
            self._leave(team, state, waiter)
            raise

    def release(self, team: str, asked: int) -> None:
        state = self._teams[team]
        state.held -= asked
        self._admit(team, state)

    def load(self, team: str) -> tuple[int, int]:
        """(sequences in flight, requests waiting) of ``team``."""
        state = self._teams.get(team)
        return (state.held, len(state.queue)) if state else (0, 0)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Per team with anything in flight or waiting: its sequences and queue."""
        return {team: {"sequences": s.held, "queued": len(s.queue)}
                for team, s in sorted(self._teams.items())}

    def _admit(self, team: str, state: _Team) -> None:
        """The head of the team's queue while it fits (FIFO: no overtaking)."""
        cap = self.limits(team).max_sequences
        while state.queue:
            head = state.queue[0]
            if head.granted.done():  # cancelled, its task not yet resumed: skip it
                state.queue.popleft()
                continue
            if state.held + head.sequences > cap:
                break
            state.queue.popleft()
            state.held += head.sequences
            head.granted.set_result(None)
        if not state.held and not state.queue and self._teams.get(team) is state:
            del self._teams[team]

    def _leave(self, team: str, state: _Team, waiter: _Waiter) -> None:
        """A waiter cancelled: out of the queue, or its grant given back."""
        if waiter.granted.done() and not waiter.granted.cancelled():
            self.release(team, waiter.sequences)  # granted just before it was cancelled
            return
        if waiter in state.queue:
            state.queue.remove(waiter)
        self._admit(team, state)  # the next in line may fit now

"""A hypothesis state machine over the engine's prefix registry.

``PrefixRegistry`` (granikv_engine), driven the way the vLLM plugin drives it:
registrations of two teams (an id registered again with other tokens replaces it),
fills completed or aborted, requests reading READY prefixes while they are unpinned,
unregistered or replaced, compaction moves applied to a simulated K/V cache. After
every step the pool's keys are exactly the placed prefixes, counts equal the model's,
content is intact and no team sees another's prefix. Every run ends by draining: the
arena must then be empty."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from granikv_engine.hot_pool import HotPool, SlotRange
from granikv_engine.prefix_registry import (
    PrefixAccessDenied,
    PrefixNotFound,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)
from tests.reliability.machines import RUNS, count, record_counts


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield from record_counts()


# ---- PrefixRegistry ---------------------------------------------------------------------
TEAMS = ("red", "blue")
N_IDS = 6
LENGTHS = (8, 30, 12, 40, 20, 52)  # p0 (red), p1 (blue), ...: their usual lengths


def stream(team: str, variant: int) -> list[int]:
    """Token streams: one team's prefixes of one variant are prefixes of each other."""
    seed = {"red": 11, "blue": 23}[team] * 7 + variant
    return [(seed * 7919 + 104729 * j) % 32000 + 1 for j in range(80)]


@dataclass
class Request:
    record: PrefixRecord  # what the request read: its release goes to it
    range: SlotRange
    tokens: tuple[int, ...]


class PrefixRegistryMachine(RuleBasedStateMachine):
    """PrefixRegistry as the vLLM plugin uses it: register (a fill then mark_ready or
    abort_fill), requests that acquire a READY prefix and release it when they finish,
    unregister / unpin at any time, compaction moves applied to a simulated cache."""

    requests = Bundle("requests")
    CAP: ClassVar[int] = 96

    def __init__(self) -> None:
        super().__init__()
        self.reg = PrefixRegistry(HotPool(1, self.CAP))
        self.kv: list[int | None] = [None] * (1 + self.CAP)  # slot -> token (fake K/V)
        self.live: list[Request] = []
        self.retired: list[PrefixRecord] = []  # replaced while read or filling
        count("prefix_registry", "runs")

    def _all(self) -> list[PrefixRecord]:
        """The ids' records, then the replaced ones that still hold slots."""
        self.retired = [r for r in self.retired if r.hot is not None]
        return [r for i in range(N_IDS) if (r := self.reg.peek(f"p{i}")) is not None
                ] + self.retired

    def _apply_moves(self) -> None:
        moves = self.reg.take_moves()
        for mv in moves:
            self.kv[mv.dst:mv.dst + mv.length] = self.kv[mv.src:mv.src + mv.length]
        count("prefix_registry", "compaction_moves", len(moves))

    def _refs(self, rec: PrefixRecord | None) -> int:
        return sum(1 for q in self.live if q.record is rec)

    @initialize()
    def start(self) -> None:
        count("prefix_registry", "steps")

    @rule(i=st.integers(0, N_IDS - 1), odd=st.integers(0, 7), pin=st.booleans())
    def register(self, i: int, odd: int, pin: bool) -> None:
        """Mostly the id's own team and tokens (so that prefixes get placed, filled and
        read); odd == 1: another team's id, 2: other tokens, 3: another length."""
        team = TEAMS[(i + (odd == 1)) % 2]
        n = LENGTHS[i] + (5 if odd == 3 else 0)
        self._register(team, i, 1 if odd == 2 else 0, n, pin)

    @rule(team=st.sampled_from(TEAMS), i=st.integers(0, N_IDS - 1), variant=st.integers(0, 1),
          n=st.integers(1, 80), pin=st.booleans())
    def register_anything(self, team: str, i: int, variant: int, n: int, pin: bool) -> None:
        self._register(team, i, variant, n, pin)

    def _register(self, team: str, i: int, variant: int, n: int, pin: bool) -> None:
        count("prefix_registry", "steps")
        pid, toks = f"p{i}", stream(team, variant)[:n]
        old = self.reg.peek(pid)
        placed_before = [(r, r.hot, r.pinned, self._refs(r), r.state) for r in self._all()]
        largest = self.reg.pool.stats().largest_free_run
        if old is not None and old.team != team:
            with pytest.raises(PrefixAccessDenied):
                self.reg.register(team, toks, prefix_id=pid, pin=pin)
            count("prefix_registry", "refused_registrations")
            return
        replaced = old is not None and (old.tokens != tuple(toks) or old.doomed)
        old_busy = old is not None and old.hot is not None and (
            self._refs(old) > 0 or old.state is PrefixState.FILLING)
        old_hot = old.hot if old is not None else None
        was_hot = old is not None and not replaced and old.hot is not None
        rec = self.reg.register(team, toks, prefix_id=pid, pin=pin)
        self._apply_moves()  # the engine copies K/V before the next forward pass
        assert rec.prefix_id == pid and rec.team == team and rec.tokens == tuple(toks)
        assert self.reg.get(pid, team) is rec
        if old is not None and not replaced:
            assert rec is old
        if replaced:
            assert old is not None and rec is not old
            if old_busy:  # its readers (or its fill) finish on its range
                assert old.doomed and old.hot == old_hot and old.key in self.reg.pool
                assert self.reg.pool.counts(old.key)[0] == 0
                self.retired.append(old)
                count("prefix_registry", "replaced_in_use")
            else:
                assert old.hot is None and old.state is PrefixState.COLD
                assert (pid in self.reg.pool) == (rec.hot is not None)
                count("prefix_registry", "replaced")
        if not was_hot:
            if n <= largest:
                assert rec.state is PrefixState.FILLING, "a free run fitted, yet COLD"
            if rec.state is PrefixState.FILLING:  # the registering request's prefill
                assert rec.hot is not None
                self.kv[rec.hot.start:rec.hot.end] = list(toks)
                count("prefix_registry", "placements")
            else:
                assert rec.hot is None and rec.state is PrefixState.COLD
                count("prefix_registry", "cold_registrations")
        for other, hot, pinned, refs, state in placed_before:
            if hot is not None and other.hot is None and other is not old:
                # evicted by this registration: only an unpinned prefix nobody reads
                assert not pinned and refs == 0 and state is PrefixState.READY, other
                assert other.state is PrefixState.COLD and self.reg.peek(other.prefix_id)
                count("prefix_registry", "evictions")

    def _pick(self, k: int, state: PrefixState | None) -> str:
        """Mostly an id in ``state`` (so that rules act on live prefixes), else any."""
        ids = sorted(r.prefix_id for r in self._all()
                     if (state is None or r.state is state) and not r.retired)
        return ids[k % len(ids)] if ids and k < 3 * N_IDS else f"p{k % N_IDS}"

    def _pick_fill(self, k: int) -> PrefixRecord | str:
        """A filling record (a replaced one too: its fill still runs), mostly; else an
        id, which may name no fill."""
        fills = [r for r in self._all() if r.state is PrefixState.FILLING]
        return fills[k % len(fills)] if fills and k < 3 * N_IDS else f"p{k % N_IDS}"

    @rule(k=st.integers(0, 4 * N_IDS - 1))
    def fill_done(self, k: int) -> None:
        count("prefix_registry", "steps")
        ref = self._pick_fill(k)
        before = ref if isinstance(ref, PrefixRecord) else self.reg.peek(ref)
        out = self.reg.mark_ready(ref)
        if before is None or before.state is not PrefixState.FILLING:
            assert out is before
            return
        if before.doomed:  # unregistered or replaced during its fill: gone now
            assert out is None and before.key not in self.reg.pool
            assert self.reg.peek(before.prefix_id) is not before
            count("prefix_registry", "deferred_frees")
        else:
            assert out is before and before.state is PrefixState.READY

    @rule(k=st.integers(0, 4 * N_IDS - 1))
    def fill_aborted(self, k: int) -> None:
        count("prefix_registry", "steps")
        ref = self._pick_fill(k)
        before = ref if isinstance(ref, PrefixRecord) else self.reg.peek(ref)
        was = before is not None and before.state is PrefixState.FILLING
        doomed = before is not None and before.doomed
        self.reg.abort_fill(ref)
        if was:
            assert before is not None and before.key not in self.reg.pool
            if doomed:
                assert self.reg.peek(before.prefix_id) is not before
            else:
                assert before.state is PrefixState.COLD and before.hot is None

    @rule(target=requests, k=st.integers(0, 4 * N_IDS - 1))
    def start_request(self, k: int) -> Any:
        """The KV manager's _take: a request bound to a prefix id."""
        count("prefix_registry", "steps")
        pid = self._pick(k, PrefixState.READY)
        try:
            rec = self.reg.get(pid, None)
        except PrefixNotFound:
            assert self.reg.peek(pid) is None or self.reg.peek(pid).doomed  # type: ignore[union-attr]
            return None
        if rec.state is not PrefixState.READY:
            return None
        hot = self.reg.acquire(pid)
        assert hot is not None and hot == rec.hot
        assert self.kv[hot.start:hot.end] == list(rec.tokens), "a hit reads wrong K/V"
        q = Request(rec, hot, rec.tokens)
        self.live.append(q)
        count("prefix_registry", "requests")
        return q

    @rule(target=requests, k=st.integers(0, 4 * N_IDS - 1))
    def start_another_request(self, k: int) -> Any:
        return self.start_request(k)

    @rule(team=st.sampled_from(TEAMS), variant=st.integers(0, 1), n=st.integers(1, 80))
    def match_prompt(self, team: str, variant: int, n: int) -> None:
        count("prefix_registry", "steps")
        prompt = stream(team, variant)[:n]
        got = self.reg.match(team, prompt)
        cands = [r for r in self._all() if r.team == team and r.state is PrefixState.READY
                 and not r.doomed and r.length < n and r.tokens == tuple(prompt[:r.length])]
        if not cands:
            assert got is None
        else:
            assert got is not None and got in cands
            assert got.length == max(r.length for r in cands)

    @rule(q=consumes(requests))
    def finish_request(self, q: Request | None) -> None:
        count("prefix_registry", "steps")
        if q is None:
            return
        assert self.kv[q.range.start:q.range.end] == list(q.tokens), "read corrupted K/V"
        rec = q.record
        assert rec.hot == q.range, "moved under a reader"
        self.live.remove(q)
        last = rec.doomed and self._refs(rec) == 0
        self.reg.release(rec)
        if last:
            assert self.reg.peek(rec.prefix_id) is not rec and rec.key not in self.reg.pool
            assert rec.hot is None
            count("prefix_registry", "deferred_frees")

    @rule(k=st.integers(0, 4 * N_IDS - 1), cross=st.integers(0, 4))
    def unregister(self, k: int, cross: int) -> None:
        """Mostly by the owner (cross == 0: the other team)."""
        count("prefix_registry", "steps")
        pid = self._pick(k, None)
        rec = self.reg.peek(pid)
        owner = rec.team if rec is not None else "red"
        team = owner if cross else TEAMS[1 - TEAMS.index(owner)]
        if rec is None or rec.doomed:
            with pytest.raises(PrefixNotFound):
                self.reg.unregister(pid, team)
            return
        if rec.team != team:
            with pytest.raises(PrefixAccessDenied):
                self.reg.unregister(pid, team)
            count("prefix_registry", "cross_team_refusals")
            return
        busy = self._refs(rec) > 0 or rec.state is PrefixState.FILLING
        assert self.reg.unregister(pid, team) is (not busy)
        with pytest.raises(PrefixNotFound):
            self.reg.get(pid, team)
        assert rec not in self.reg.records(team)
        if busy:
            assert rec.hot is not None and self.reg.pool.range_of(pid) == rec.hot
            count("prefix_registry", "unregistered_in_use")
        else:
            assert self.reg.peek(pid) is None and pid not in self.reg.pool

    @rule(k=st.integers(0, 4 * N_IDS - 1), cross=st.integers(0, 4), on=st.booleans())
    def pin_or_unpin(self, k: int, cross: int, on: bool) -> None:
        count("prefix_registry", "steps")
        pid = self._pick(k, None)
        rec = self.reg.peek(pid)
        owner = rec.team if rec is not None else "red"
        team = owner if cross else TEAMS[1 - TEAMS.index(owner)]
        call = self.reg.pin if on else self.reg.unpin
        if rec is None or rec.doomed:
            with pytest.raises(PrefixNotFound):
                call(pid, team)
        elif rec.team != team:
            with pytest.raises(PrefixAccessDenied):
                call(pid, team)
            count("prefix_registry", "cross_team_refusals")
        else:
            assert call(pid, team).pinned is on
            if not on and self._refs(rec):
                count("prefix_registry", "unpinned_in_use")

    @rule()
    def compact(self) -> None:
        count("prefix_registry", "steps")
        for mv in self.reg.apply_compaction():
            self.kv[mv.dst:mv.dst + mv.length] = self.kv[mv.src:mv.src + mv.length]
            count("prefix_registry", "compaction_moves")

    @invariant()
    def consistent(self) -> None:
        recs = self._all()
        placed = {r.key: r for r in recs if r.hot is not None}
        assert set(self.reg.pool.keys()) == set(placed), "a slot range nobody owns"
        spans = sorted(r.hot for r in placed.values() if r.hot is not None)
        for a, b in zip(spans, spans[1:]):
            assert a.end <= b.start
        for r in recs:
            fill = r.state is PrefixState.FILLING
            assert (r.hot is not None) == (r.state is not PrefixState.COLD), r
            if r.doomed:
                assert self._refs(r) + fill > 0, "a doomed prefix nobody holds"
            if r.hot is None:
                continue
            assert self.reg.pool.range_of(r.key) == r.hot
            assert r.hot.length == r.length
            pins = 1 if r.pinned and not r.doomed else 0
            assert self.reg.pool.counts(r.key) == (pins, self._refs(r) + fill)
            assert self.kv[r.hot.start:r.hot.end] == list(r.tokens), f"{r.prefix_id}: K/V"
            other = "blue" if r.team == "red" else "red"
            if not r.doomed:
                with pytest.raises(PrefixAccessDenied):
                    self.reg.get(r.prefix_id, other)
                assert r not in self.reg.records(other)
        for q in self.live:
            assert q.record.hot == q.range

    def teardown(self) -> None:
        for q in list(self.live):
            self.reg.release(q.record)
        self.live.clear()
        for r in self._all():
            if r.state is PrefixState.FILLING:
                self.reg.mark_ready(r)
        for r in self._all():
            self.reg.unregister(r.prefix_id, r.team)
        s = self.reg.pool.stats()
        assert self._all() == [] and (s.used, s.pinned, s.referenced, s.entries) == (0, 0, 0, 0)
        count("prefix_registry", "drained")


TestPrefixRegistry = PrefixRegistryMachine.TestCase
TestPrefixRegistry.settings = RUNS

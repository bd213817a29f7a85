import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from granikv_engine.hot_pool import HotPool, Move, SlotRange
from granikv_engine.prefix_registry import (
    PrefixAccessDenied,
    PrefixConflict,
    PrefixNotFound,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)


def make(cap: int = 100) -> PrefixRegistry:
    return PrefixRegistry(HotPool(1, cap))


def test_register_fill_ready_and_idempotent() -> None:
    reg = make()
    rec = reg.register("red", [5, 6, 7], prefix_id="p1")
    assert rec.hot == SlotRange(1, 3) and rec.state is PrefixState.FILLING and rec.pinned
    assert reg.pool.counts("p1") == (1, 1)  # pinned, and referenced by its fill
    reg.mark_ready("p1")
    assert reg.pool.counts("p1") == (1, 0)
    again = reg.register("red", [5, 6, 7], prefix_id="p1")
    assert again is rec and reg.pool.counts("p1") == (1, 0)
    with pytest.raises(PrefixAccessDenied):
        reg.register("blue", [5, 6, 7], prefix_id="p1")


def test_register_again_with_other_tokens_replaces() -> None:
    """Nobody reads the old record: its slots go at once, the id names the new tokens."""
    reg = make(cap=10)
    old = reg.register("red", [5, 6, 7, 8, 9, 10], prefix_id="p1")
    reg.mark_ready("p1")
    new = reg.register("red", [5, 6, 7, 8, 9, 10, 11, 12], prefix_id="p1")  # longer: fits
    assert new is not old and new.tokens == (5, 6, 7, 8, 9, 10, 11, 12)
    assert new.state is PrefixState.FILLING and new.hot == SlotRange(1, 8)
    assert old.hot is None and reg.pool.stats().used == 8 and reg.replacements == 1
    reg.mark_ready(new)
    shorter = reg.register("red", [1, 2], prefix_id="p1")
    assert shorter.hot == SlotRange(1, 2) and reg.get("p1", "red") is shorter
    assert [r.prefix_id for r in reg.records()] == ["p1"] and len(reg.pool) == 1


def test_replaced_record_stays_for_its_readers() -> None:
    """In-flight readers finish on the old range; new readers get the new one; the old
    range is freed with its last reader, and nothing else is lost or moved."""
    reg = make(cap=20)
    old = reg.register("red", list(range(8)), prefix_id="p")
    reg.mark_ready("p")
    assert reg.acquire("p") == SlotRange(1, 8)
    new = reg.register("red", list(range(100, 110)), prefix_id="p")
    assert new.hot == SlotRange(9, 10) and old.hot == SlotRange(1, 8) and old.doomed
    assert reg.get("p", "red") is new and reg.match("red", list(range(9))) is None
    reg.mark_ready(new)
    assert reg.acquire("p") == SlotRange(9, 10)
    reg.compact = True
    assert reg.apply_compaction() == []  # both read: neither moves
    reg.release(old)
    assert old.hot is None and reg.pool.stats().used == 10
    reg.release(new)
    assert reg.pool.counts("p") == (1, 0)


def test_replacing_a_filling_or_removed_record() -> None:
    reg = make(cap=20)
    filling = reg.register("red", list(range(6)), prefix_id="p")  # its fill still runs
    new = reg.register("red", list(range(50, 56)), prefix_id="p")
    assert filling.doomed and filling.hot == SlotRange(1, 6) and new.hot == SlotRange(7, 6)
    assert reg.mark_ready(filling) is None and filling.hot is None  # the old fill ends
    assert reg.pool.stats().used == 6 and reg.get("p", "red") is new
    reg.mark_ready("p")
    reg.acquire("p")
    assert reg.unregister("p", "red") is False  # being removed, read by one request
    again = reg.register("red", list(range(50, 56)), prefix_id="p")  # no "retry later"
    assert again is not new and again.state is PrefixState.FILLING
    reg.abort_fill(again)
    reg.release(new)
    assert reg.pool.stats().used == 0 and reg.get("p", "red").state is PrefixState.COLD


def test_default_ids_are_per_team_and_content() -> None:
    reg = make()
    a = reg.register("red", [1, 2])
    b = reg.register("blue", [1, 2])
    assert a.prefix_id != b.prefix_id and a.content_hash == b.content_hash
    assert a.prefix_id.startswith("red-")


def test_team_scoping() -> None:
    reg = make()
    reg.register("red", [1, 2, 3], prefix_id="r")
    reg.mark_ready("r")
    assert reg.get("r", "red").team == "red"
    with pytest.raises(PrefixAccessDenied):
        reg.get("r", "blue")
    with pytest.raises(PrefixNotFound):
        reg.get("zzz", "red")
    assert reg.match("blue", [1, 2, 3, 4]) is None
    with pytest.raises(PrefixAccessDenied):
        reg.unregister("r", "blue")
    assert [r.prefix_id for r in reg.records("blue")] == []


def test_match_is_longest_and_token_exact() -> None:
    reg = make()
    for pid, toks in [("short", [1, 2]), ("long", [1, 2, 3, 4]), ("other", [1, 9, 3])]:
        reg.register("t", toks, prefix_id=pid)
        reg.mark_ready(pid)
    assert reg.match("t", [1, 2, 3, 4, 5]).prefix_id == "long"  # type: ignore[union-attr]
    assert reg.match("t", [1, 2, 3, 5]).prefix_id == "short"  # type: ignore[union-attr]
    assert reg.match("t", [1, 2, 3, 4]).prefix_id == "short"  # type: ignore[union-attr]
    assert reg.match("t", [2, 2, 3]) is None
    reg.register("t", [7, 7, 7], prefix_id="filling")  # not ready: never matched
    assert reg.match("t", [7, 7, 7, 7]) is None


def test_unregister_defers_while_in_use() -> None:
    reg = make()
    reg.register("t", list(range(10)), prefix_id="p")
    reg.mark_ready("p")
    assert reg.acquire("p") == SlotRange(1, 10)
    assert reg.unregister("p", "t") is False
    with pytest.raises(PrefixNotFound):
        reg.get("p", "t")  # gone for new users at once
    assert reg.pool.stats().used == 10  # but the slots stay until the reader is done
    reg.release("p")
    assert reg.pool.stats().used == 0 and reg.records() == []


def test_pinned_survives_pressure_unpinned_is_evicted() -> None:
    reg = make(cap=30)
    reg.register("t", list(range(10)), prefix_id="pinned")
    reg.register("t", list(range(100, 110)), prefix_id="loose", pin=False)
    for p in ("pinned", "loose"):
        reg.mark_ready(p)
    reg.register("t", list(range(200, 220)), prefix_id="big")
    assert reg.get("pinned", "t").hot == SlotRange(1, 10)
    assert reg.get("loose", "t").state is PrefixState.COLD and reg.get("loose", "t").hot is None
    assert reg.get("big", "t").hot == SlotRange(11, 20)
    assert reg.evictions == 1


def test_too_big_is_cold_not_an_error() -> None:
    reg = make(cap=5)
    rec = reg.register("t", list(range(6)), prefix_id="huge")
    assert rec.state is PrefixState.COLD and rec.hot is None
    assert reg.acquire("huge") is None and reg.cold_registrations == 1


def test_abort_fill_returns_slots() -> None:
    reg = make()
    reg.register("t", [1, 2, 3], prefix_id="p")
    reg.abort_fill("p")
    assert reg.pool.stats().used == 0 and reg.get("p", "t").state is PrefixState.COLD
    rec = reg.register("t", [1, 2, 3], prefix_id="p")  # a retry places it again
    assert rec.state is PrefixState.FILLING


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["reg", "regloose", "ready", "acq", "rel", "unreg",
                                           "pin", "unpin"]),
                          st.integers(0, 5), st.integers(1, 30)), max_size=50))
def test_registry_never_loses_or_overlaps_slots(ops: list[tuple[str, int, int]]) -> None:
    reg = make(cap=60)
    held: dict[str, list[PrefixRecord]] = {}  # prefix -> records read by "requests"
    for op, k, n in ops:
        pid = f"p{k}"
        try:
            if op in ("reg", "regloose"):
                reg.register("t", [k] * n if pid not in {r.prefix_id for r in reg.records()}
                             else list(reg.get(pid, "t").tokens), prefix_id=pid,
                             pin=op == "reg")
            elif op == "ready":
                reg.mark_ready(pid)
            elif op == "acq" and reg.acquire(pid) is not None:
                held.setdefault(pid, []).append(reg.get(pid, "t"))
            elif op == "rel" and held.get(pid):
                reg.release(held[pid].pop())
            elif op == "unreg":
                reg.unregister(pid, "t")
            elif op == "pin":
                reg.pin(pid, "t")
            elif op == "unpin":
                reg.unpin(pid, "t")
        except (PrefixNotFound, PrefixConflict):
            pass
        live = [r for r in reg.records() if r.hot is not None]
        spans = sorted(r.hot for r in live if r.hot)
        for a, b in zip(spans, spans[1:]):
            assert a.end <= b.start
        for r in live:
            assert reg.pool.range_of(r.prefix_id) == r.hot
            assert r.hot.length == r.length  # type: ignore[union-attr]
        # a prefix someone still reads is never evicted from under them
        for recs in held.values():
            for rec in recs:
                assert rec.key in reg.pool and rec.hot == reg.pool.range_of(rec.key)
        assert reg.pool.stats().used == sum(reg.pool.range_of(k).length for k in reg.pool.keys())


def test_fragmented_registration_compacts_and_keeps_content() -> None:
    import torch

    reg = make(cap=600)
    kv = torch.full((601,), -1, dtype=torch.int64)  # slot -> the prefix's index (fake K/V)
    for i, (pid, n) in enumerate([("a", 200), ("b", 200), ("c", 150)]):
        rec = reg.register("t", list(range(i * 1000, i * 1000 + n)), prefix_id=pid)
        reg.mark_ready(pid)
        kv[rec.hot.start:rec.hot.end] = i  # type: ignore[union-attr]
    reg.acquire("c")  # c is being read: it must not move
    reg.unregister("a", "t")  # a 200-slot hole at the start, 50 free at the end
    d = reg.register("t", list(range(9000, 9240)), prefix_id="d")
    assert d.state is PrefixState.COLD and reg.compactions == 1  # b moved, still no room
    first = reg.take_moves()
    assert first == [Move(201, 1, 200)]
    reg.release("c")
    d = reg.register("t", list(range(9000, 9240)), prefix_id="d")
    assert d.state is PrefixState.FILLING and d.hot == SlotRange(351, 240)
    second = reg.take_moves()
    assert second == [Move(401, 201, 150)] and reg.compactions == 2
    for moves in (first, second):  # as vLLM's worker does: one gather, then one scatter
        src = torch.cat([torch.arange(m.src, m.src + m.length) for m in moves])
        dst = torch.cat([torch.arange(m.dst, m.dst + m.length) for m in moves])
        kv[dst] = kv[src]
    for i, pid in ((1, "b"), (2, "c")):
        r = reg.get(pid, "t").hot
        assert bool((kv[r.start:r.end] == i).all())  # type: ignore[union-attr]


def test_implicit_prefixes_stay_in_their_budget_and_evict_only_each_other() -> None:
    reg = make(cap=100)
    pinned = reg.register("t", list(range(1000, 1030)), prefix_id="pinned")
    loose = reg.register("t", list(range(2000, 2020)), prefix_id="loose", pin=False)
    for p in ("pinned", "loose"):
        reg.mark_ready(p)
    a = reg.promote("t", list(range(10)), budget=40)
    assert a is not None and a.implicit and a.state is PrefixState.READY and not a.pinned
    assert a.prefix_id.startswith("implicit-t-") and reg.implicit_promotions == 1
    assert reg.promote("t", list(range(10)), budget=40) is None  # there already
    assert reg.promote("t", list(range(1000, 1030)), budget=40) is None  # registered
    reg.acquire(a.prefix_id)  # read: never evicted
    b = reg.promote("t", list(range(50, 70)), budget=40)
    assert b is not None and reg.implicit_slots() == 30
    assert reg.promote("t", list(range(80, 100)), budget=40) is not None  # evicts b
    assert reg.peek(b.prefix_id) is None and reg.implicit_evictions == 1
    assert reg.promote("t", list(range(300, 341)), budget=40) is None  # over the budget
    reg.release(a)
    # explicit prefixes are never evicted by implicit ones, pinned or not
    assert pinned.hot is not None and loose.hot is not None
    assert reg.match("t", list(range(11))) is a  # bound like any READY prefix
    # a registration may evict an implicit prefix; it is then gone, not COLD
    big = reg.register("t", list(range(5000, 5045)), prefix_id="big")
    assert big.state is PrefixState.FILLING
    assert reg.peek(a.prefix_id) is None and reg.implicit_evictions >= 2


def test_registering_an_implicit_prefixs_tokens_adopts_it() -> None:
    reg = make(cap=100)
    imp = reg.promote("t", list(range(10)), budget=50)
    assert imp is not None and imp.hot is not None
    reg.acquire(imp.prefix_id)
    rec = reg.register("t", list(range(10)), prefix_id="mine")
    assert rec is imp and rec.prefix_id == "mine" and not rec.implicit and rec.pinned
    assert rec.state is PrefixState.READY and reg.pool.counts("mine") == (1, 1)
    assert reg.implicit_adoptions == 1 and reg.implicit_slots() == 0
    reg.release(rec)  # the reader that started on the implicit entry
    assert reg.pool.counts("mine") == (1, 0)
    other = reg.promote("u", list(range(10)), budget=50)  # another team: its own entry
    assert other is not None and other.team == "u"

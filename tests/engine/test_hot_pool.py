import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from granikv_engine.hot_pool import HotPool, Move, SlotRange


def test_first_fit_and_exact_ranges() -> None:
    pool = HotPool(start=1, capacity=100)
    assert pool.allocate("a", 30).range == SlotRange(1, 30)
    assert pool.allocate("b", 50).range == SlotRange(31, 50)
    assert pool.allocate("c", 20).range == SlotRange(81, 20)
    res = pool.allocate("d", 1, evict=False)
    assert not res.ok and res.reason == "no_space"
    assert pool.allocate("e", 101).reason == "too_large"


def test_lru_eviction_skips_pinned_and_referenced() -> None:
    pool = HotPool(0, 90)
    for k in "abc":
        pool.allocate(k, 30)
    pool.pin("a")       # oldest but pinned
    pool.acquire("b")   # referenced
    res = pool.allocate("d", 30)
    assert res.evicted == ("c",)
    assert res.range == SlotRange(60, 30)
    pool.release("b")   # b becomes evictable, and most recently used after c is gone
    res = pool.allocate("e", 30)
    assert res.evicted == ("b",) and res.range == SlotRange(30, 30)


def test_eviction_takes_the_lru_run_that_makes_room_or_nothing() -> None:
    pool = HotPool(0, 100)
    pool.allocate("a", 40)
    pool.allocate("b", 20)
    pool.allocate("c", 40)
    pool.pin("b")  # a gap can never span b
    res = pool.allocate("x", 50)
    assert not res.ok and res.evicted == () and res.reason == "fragmented"
    assert set(pool.keys()) == {"a", "b", "c"}  # nothing was evicted in vain
    res = pool.allocate("y", 40)
    assert res.evicted == ("a",) and res.range == SlotRange(0, 40)


def test_fragmented_then_compact() -> None:
    pool = HotPool(10, 100)
    for k in "abcd":
        pool.allocate(k, 25)
    pool.pin("b")
    pool.pin("d")
    pool.free("a")
    pool.free("c")
    assert pool.stats().free == 50 and pool.stats().largest_free_run == 25
    assert pool.stats().fragmentation == pytest.approx(0.5)
    res = pool.allocate("e", 40, evict=False)
    assert res.reason == "fragmented"
    moves = pool.compact()
    assert moves == [Move(35, 10, 25), Move(85, 35, 25)]
    assert pool.range_of("b") == SlotRange(10, 25) and pool.range_of("d") == SlotRange(35, 25)
    assert pool.allocate("e", 40).range == SlotRange(60, 40)


def test_compact_keeps_referenced_entries_in_place() -> None:
    pool = HotPool(0, 100)
    pool.allocate("a", 10)
    pool.allocate("b", 10)
    pool.allocate("c", 10)
    pool.free("a")
    pool.acquire("b")
    assert pool.compact() == []  # b cannot move, c sits right after it
    pool.release("b")
    assert pool.compact() == [Move(10, 0, 10), Move(20, 10, 10)]


def test_deferred_free() -> None:
    pool = HotPool(0, 10)
    pool.allocate("a", 10)
    pool.pin("a")
    pool.acquire("a")
    assert pool.free("a") is False
    assert pool.unpin("a") is False and "a" in pool
    assert pool.release("a") is True and "a" not in pool
    assert pool.stats().free == 10


def test_errors_are_clear() -> None:
    pool = HotPool(0, 10)
    with pytest.raises(KeyError, match="no HOT entry"):
        pool.pin("nope")
    pool.allocate("a", 5)
    with pytest.raises(KeyError, match="already holds"):
        pool.allocate("a", 1)
    with pytest.raises(ValueError, match="not pinned"):
        pool.unpin("a")
    with pytest.raises(ValueError, match="no references"):
        pool.release("a")
    pool.pin("a")
    with pytest.raises(ValueError, match="pinned or referenced"):
        pool.evict("a")


OPS = st.lists(st.tuples(st.sampled_from(["alloc", "pin", "unpin", "acq", "rel", "free",
                                          "compact"]),
                         st.integers(0, 7), st.integers(1, 40)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_random_interleavings_keep_invariants(ops: list[tuple[str, int, int]]) -> None:
    cap, base = 100, 5
    pool = HotPool(base, cap)
    kv = torch.full((base + cap,), -1, dtype=torch.int64)  # slot -> owner key (simulated K/V)
    pins: dict[int, int] = {}
    refs: dict[int, int] = {}
    for op, key, n in ops:
        if op == "alloc" and key not in pool:
            res = pool.allocate(key, n)
            for v in res.evicted:
                assert pins.get(v, 0) == 0 and refs.get(v, 0) == 0, "evicted a live entry"
                pins.pop(v, None), refs.pop(v, None)
            if res.ok:
                r = res.range
                assert base <= r.start and r.end <= base + cap
                kv[r.start:r.end] = key
        elif key not in pool:
            continue
        elif op == "pin":
            pool.pin(key)
            pins[key] = pins.get(key, 0) + 1
        elif op == "unpin" and pins.get(key, 0):
            pool.unpin(key)
            pins[key] -= 1
        elif op == "acq":
            pool.acquire(key)
            refs[key] = refs.get(key, 0) + 1
        elif op == "rel" and refs.get(key, 0):
            pool.release(key)
            refs[key] -= 1
        elif op == "free":
            now = pool.free(key)
            assert now == (pins.get(key, 0) == 0 and refs.get(key, 0) == 0)
        elif op == "compact":
            before = {k: pool.range_of(k) for k in pool.keys()}
            for m in pool.compact():
                kv[m.dst:m.dst + m.length] = kv[m.src:m.src + m.length].clone()
            for k, r in before.items():
                if refs.get(k, 0):
                    assert pool.range_of(k) == r, "moved a referenced entry"
        # invariants: disjoint ranges, content where the pool says, no slot lost
        ranges = sorted(pool.range_of(k) for k in pool.keys())
        for a, b in zip(ranges, ranges[1:]):
            assert a.end <= b.start
        for k in pool.keys():
            r = pool.range_of(k)
            assert bool((kv[r.start:r.end] == k).all()), "content lost"
            assert pool.counts(k) == (pins.get(k, 0), refs.get(k, 0))
        st_ = pool.stats()
        assert st_.used + st_.free == cap and st_.used == sum(r.length for r in ranges)

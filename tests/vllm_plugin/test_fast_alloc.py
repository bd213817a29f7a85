"""The fast allocation path for running requests (fast_alloc.py) against vLLM's own
``allocate_slots``: one random sequence of admissions (with prefix-cache hits), prefill
chunks, decode steps, preemptions when the pool runs dry, and finishes, through two
GraniKV KV managers on vLLM's real block pool, one with the fast path and one without.
After every call both must have returned the same blocks and hold the same state: every
request's blocks, the free queue in order, every block's reference count and hash,
the cached-block counts and the blocks recorded for zeroing."""

from __future__ import annotations

import random
from typing import Any

import pytest
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

from granikv_engine.vllm_plugin.core import kv_manager as kvm
from granikv_engine.vllm_plugin.core.fast_alloc import NOT_HANDLED
from tests.vllm_plugin.twin_driver import drive, granikv_manager

MAX_LEN = 160


def _manager(fast: bool, num_blocks: int, zeroing: bool,
             events: bool = True) -> kvm.GraniKVCacheManager:
    # zeroing forced, so that both paths' records of blocks to zero are compared
    return granikv_manager(num_blocks, MAX_LEN, fast_alloc=fast, events=events,
                           zeroing=zeroing)


def _state(kv: kvm.GraniKVCacheManager, live: list[str]) -> Any:
    (m,) = kv.coordinator.single_type_managers
    pool = kv.block_pool
    return ({rid: kv.get_block_ids(rid) for rid in live},
            [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            [(b.ref_cnt, b.block_hash, b.block_hash_num_tokens) for b in pool.blocks],
            {h: sorted(b.block_id for b in _cached(pool, h))
             for h in pool.cached_block_hash_to_block._cache},
            {k: set(v) for k, v in pool.cached_block_hashes_by_block.items()},
            dict(m.num_cached_block), m.take_new_block_ids(),
            [type(e).__name__ for e in pool.take_events()])


def _cached(pool: Any, h: Any) -> list[Any]:
    got = pool.cached_block_hash_to_block._cache[h]
    return list(got.values()) if isinstance(got, dict) else [got]


@pytest.mark.parametrize("seed,zeroing,events",
                         [(s, s % 2 == 1, s % 3 != 0) for s in range(6)])
def test_the_fast_path_leaves_every_piece_of_state_as_vllms_own(
        seed: int, zeroing: bool, events: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``zeroing``: the managers record new blocks for the worker to zero. ``events``:
    KV-cache events on (the fast path then caches through vLLM's own call)."""
    init_none_hash(sha256)
    hasher = get_request_block_hasher(1, sha256)
    fast_calls = []
    real = kvm.allocate_running

    def counted(*a: Any) -> Any:
        got = real(*a)
        fast_calls.append(got is not NOT_HANDLED)
        return got

    monkeypatch.setattr(kvm, "allocate_running", counted)
    rng = random.Random(seed)
    kvs = [_manager(True, 420, zeroing, events), _manager(False, 420, zeroing, events)]
    prefixes = [[rng.randrange(3, 500) for _ in range(rng.randrange(5, 40))]
                for _ in range(3)]

    def prompt() -> list[int]:  # often on a prefix
        base = rng.choice(prefixes) if rng.random() < 0.7 else []
        return base + [rng.randrange(3, 500) for _ in range(rng.randrange(1, 50))]

    def check(live: list[str]) -> None:
        assert _state(kvs[0], live) == _state(kvs[1], live)

    drive(kvs, rng, 900, prompt, hasher, MAX_LEN, check)
    assert sum(fast_calls) >= 150, sum(fast_calls)  # the fast path did run
    assert not all(fast_calls)  # and handed other calls to the stock path

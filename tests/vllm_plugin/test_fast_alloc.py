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
import torch
from vllm import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request, RequestStatus

from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixRegistry
from granikv_engine.vllm_plugin.core import kv_manager as kvm
from granikv_engine.vllm_plugin.core.fast_alloc import NOT_HANDLED

MAX_LEN = 160


def _manager(fast: bool, num_blocks: int, zeroing: bool,
             events: bool = True) -> kvm.GraniKVCacheManager:
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    kv = KVCacheManager(cfg, max_model_len=MAX_LEN, scheduler_block_size=1,
                        hash_block_size=1, enable_caching=True,
                        enable_kv_cache_events=events)
    arena = kvm.reserve_arena(kv.block_pool, 16)
    # vLLM records new blocks for the worker to zero only beside Mamba layers, which
    # GraniKV's one KV group never has; forced here so both paths' records are compared
    kv.coordinator.single_type_managers[0]._record_new_block_ids = zeroing
    return kvm.GraniKVCacheManager.adopt(kv, PrefixRegistry(HotPool(arena.start,
                                                                    arena.length)),
                                         arena, fast_alloc=fast)


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


class Twin:
    """One request as each manager sees it (requests carry their own state)."""

    def __init__(self, rid: str, prompt: list[int], hasher: Any) -> None:
        sp = SamplingParams(max_tokens=MAX_LEN)
        self.reqs = [Request(rid, list(prompt), sp, None, block_hasher=hasher)
                     for _ in range(2)]

    def each(self, fn: Any) -> list[Any]:
        return [fn(i, r) for i, r in enumerate(self.reqs)]


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
    running: list[Twin] = []
    waiting: list[Twin] = []
    n = 0
    for _ in range(900):
        op = rng.random()
        if op < 0.08 or not (running or waiting):  # a new request, often on a prefix
            base = rng.choice(prefixes) if rng.random() < 0.7 else []
            prompt = base + [rng.randrange(3, 500) for _ in range(rng.randrange(1, 50))]
            waiting.append(Twin(f"r{n}", prompt, hasher))
            n += 1
            continue
        if op < 0.2 and waiting:  # admit the oldest waiting request, as the scheduler
            t = waiting[0]
            chunk = rng.randrange(1, 64)

            def admit(i: int, r: Request, chunk: int = chunk) -> Any:
                blocks, hit = kvs[i].get_computed_blocks(r)[:2]
                new = min(chunk, r.num_tokens - hit)
                got = kvs[i].allocate_slots(r, new, num_new_computed_tokens=hit,
                                            new_computed_blocks=blocks)
                if got is not None:
                    r.status = RequestStatus.RUNNING
                    r.num_computed_tokens = hit + new
                return None if got is None else got.get_block_ids()

            outs = t.each(admit)
            assert outs[0] == outs[1]
            if outs[0] is not None:
                running.append(waiting.pop(0))
        elif op < 0.25 and running:  # a request finishes
            t = running.pop(rng.randrange(len(running)))
            t.each(lambda i, r: kvs[i].free(r))
        elif running:  # a step for a running request: a prefill chunk, or decode
            t = running[rng.randrange(len(running))]
            left = t.reqs[0].num_tokens - t.reqs[0].num_computed_tokens
            new = rng.randrange(1, left + 1) if left > 1 else 1
            tok = rng.randrange(3, 500)

            def step(i: int, r: Request, new: int = new, tok: int = tok) -> Any:
                got = kvs[i].allocate_slots(r, new, num_lookahead_tokens=0)
                if got is None:
                    return None
                r.num_computed_tokens += new
                if r.num_computed_tokens == r.num_tokens:  # the step sampled a token
                    r.append_output_token_ids(tok)
                return got.get_block_ids()

            outs = t.each(step)
            assert outs[0] == outs[1]
            if outs[0] is None or t.reqs[0].num_tokens >= MAX_LEN - 1:  # preempt / done
                running.remove(t)
                t.each(lambda i, r: kvs[i].free(r))
                if outs[0] is None:
                    for r in t.reqs:
                        r.status = RequestStatus.PREEMPTED
                        r.num_computed_tokens = 0
                    waiting.append(t)
        live = [t.reqs[0].request_id for t in running]
        assert _state(kvs[0], live) == _state(kvs[1], live)
    assert sum(fast_calls) >= 150, sum(fast_calls)  # the fast path did run
    assert not all(fast_calls)  # and handed other calls to the stock path

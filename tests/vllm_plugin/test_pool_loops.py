"""The block pool's loops in one pass (pool_loops.py) against vLLM's own
``get_new_blocks``, ``free_blocks`` and ``touch``: one random sequence of admissions
(prompts that share documents, so chunks hit and are evicted under pressure), prefill
chunks, decode steps, preemptions when the pool runs dry and finishes, through two
GraniKV KV managers with chunked caching on vLLM's real block pool, one with the
one-pass loops and one with vLLM's. After every call both must have returned the same
blocks and hold the same state: every request's blocks, the free queue in order and its
count, every block's reference count and hash, and the chunk cache's index."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixRegistry
from granikv_engine.vllm_plugin.core import kv_manager as kvm
from granikv_engine.vllm_plugin.core import pool_loops
from tests.vllm_plugin.twin_driver import Mix, drive

CHUNK = 4
MAX_LEN = 120


def _manager(one_pass: bool, num_blocks: int, monkeypatch: pytest.MonkeyPatch,
             events: bool = False) -> kvm.GraniKVCacheManager:
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    kv = KVCacheManager(cfg, max_model_len=MAX_LEN, scheduler_block_size=1,
                        hash_block_size=1, enable_caching=True,
                        enable_kv_cache_events=events)
    arena = kvm.reserve_arena(kv.block_pool, 16)
    with monkeypatch.context() as m:
        if not one_pass:  # vLLM's loops (with the HOT-skipping touch)
            m.setattr(pool_loops, "install",
                      lambda pool, evict, hot_len: kvm._patch_touch(pool))
        got = kvm.GraniKVCacheManager.adopt(
            kv, PrefixRegistry(HotPool(arena.start, arena.length)), arena,
            fast_alloc=True, hash_chunk=CHUNK)
    assert (got.block_pool.get_new_blocks.__module__ == pool_loops.__name__) is one_pass
    return got


def _state(kv: kvm.GraniKVCacheManager, live: list[str]) -> Any:
    pool = kv.block_pool
    q = pool.free_block_queue
    assert kv.chunks is not None
    return ({rid: kv.get_block_ids(rid) for rid in live},
            [b.block_id for b in q.get_all_free_blocks()], q.num_free_blocks,
            [(b.ref_cnt, b.block_hash, b.block_hash_num_tokens,
              b.prev_free_block is None, b.next_free_block is None) for b in pool.blocks],
            {h: [b.block_id for b in run] for h, run in kv.chunks.index.items()},
            kv.chunks.evictions)


@pytest.mark.parametrize("seed", range(5))
def test_one_pass_loops_leave_every_piece_of_state_as_vllms_own(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    init_none_hash(sha256)
    hasher = get_request_block_hasher(CHUNK, sha256)
    rng = random.Random(seed)
    # a pool that runs dry: cached chunks are evicted and hits are taken from the queue
    kvs = [_manager(True, 330, monkeypatch), _manager(False, 330, monkeypatch)]
    docs = [[rng.randrange(3, 500) for _ in range(rng.randrange(6, 60))] for _ in range(4)]

    def prompt() -> list[int]:  # often on a document
        base = rng.choice(docs) if rng.random() < 0.75 else []
        return base + [rng.randrange(3, 500) for _ in range(rng.randrange(1, 30))]

    def check(live: list[str]) -> None:
        assert _state(kvs[0], live) == _state(kvs[1], live)

    hits = drive(kvs, rng, 1000, prompt, hasher, MAX_LEN, check,
                 Mix(new=0.1, admit=0.25, finish=0.32))
    evicted = kvs[0].chunks.evictions if kvs[0].chunks is not None else 0
    assert hits >= 20, hits  # chunks were hit
    assert evicted >= 20, evicted  # and evicted by reuse


@pytest.mark.parametrize("events", [True, False])
def test_a_watched_pool_takes_vllms_loops(events: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With KV-cache events on (something else watches the blocks) every call is
    vLLM's own, so events are emitted as vLLM emits them; with nothing watching, none."""
    from vllm.v1.core.block_pool import BlockPool

    calls: list[str] = []
    for name in ("get_new_blocks", "free_blocks", "touch"):
        real = getattr(BlockPool, name)

        def counted(self: Any, *a: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(self, *a)

        monkeypatch.setattr(BlockPool, name, counted)
    pool = _manager(True, 64, monkeypatch, events=events).block_pool
    blocks = pool.get_new_blocks(3)
    pool.touch(blocks)
    pool.free_blocks(blocks)
    pool.free_blocks(blocks)
    assert pool.free_block_queue.num_free_blocks == 64 - 1 - 16
    want = ["get_new_blocks", "touch", "free_blocks", "free_blocks"] if events else []
    assert calls == want

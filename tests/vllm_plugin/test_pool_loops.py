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
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

from granikv_engine.vllm_plugin.core import kv_manager as kvm
from granikv_engine.vllm_plugin.core import pool_loops
from tests.vllm_plugin.twin_driver import Mix, drive, granikv_manager

CHUNK = 4
MAX_LEN = 120


def _manager(one_pass: bool, num_blocks: int, monkeypatch: pytest.MonkeyPatch,
             events: bool = False, chunk: int = CHUNK) -> kvm.GraniKVCacheManager:
    with monkeypatch.context() as m:
        if not one_pass:  # vLLM's loops
            m.setattr(pool_loops, "install", lambda *a, **kw: None)
        got = granikv_manager(num_blocks, MAX_LEN, hash_chunk=chunk, events=events)
    assert (got.block_pool.free_blocks.__module__ == pool_loops.__name__) is one_pass
    # vLLM's prefix cache (chunk 1) keeps vLLM's get_new_blocks
    assert (got.block_pool.get_new_blocks.__module__ == pool_loops.__name__) is (
        one_pass and chunk > 1)
    return got


def _state(kv: kvm.GraniKVCacheManager, live: list[str]) -> Any:
    pool = kv.block_pool
    q = pool.free_block_queue
    cache = ({h: [b.block_id for b in run] for h, run in kv.chunks.index.items()},
             kv.chunks.evictions) if kv.chunks is not None else (
        sorted(map(repr, pool.cached_block_hash_to_block._cache.items())), 0)
    return ({rid: kv.get_block_ids(rid) for rid in live},
            [b.block_id for b in q.get_all_free_blocks()], q.num_free_blocks,
            [(b.ref_cnt, b.block_hash, b.block_hash_num_tokens,
              b.prev_free_block is None, b.next_free_block is None) for b in pool.blocks],
            cache)


@pytest.mark.parametrize("seed,chunk", [(s, CHUNK) for s in range(5)] + [(5, 1), (6, 1)])
def test_one_pass_loops_leave_every_piece_of_state_as_vllms_own(
        seed: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``chunk`` 1: vLLM's prefix cache, one hash a token (with KV events or a
    connector); the one-pass free_blocks and touch, vLLM's get_new_blocks."""
    init_none_hash(sha256)
    hasher = get_request_block_hasher(chunk, sha256)
    rng = random.Random(seed)
    # a pool that runs dry: cached chunks are evicted and hits are taken from the queue
    kvs = [_manager(True, 330, monkeypatch, chunk=chunk),
           _manager(False, 330, monkeypatch, chunk=chunk)]
    docs = [[rng.randrange(3, 500) for _ in range(rng.randrange(6, 60))] for _ in range(4)]

    def prompt() -> list[int]:  # often on a document
        base = rng.choice(docs) if rng.random() < 0.75 else []
        return base + [rng.randrange(3, 500) for _ in range(rng.randrange(1, 30))]

    def check(live: list[str]) -> None:
        assert _state(kvs[0], live) == _state(kvs[1], live)

    hits = drive(kvs, rng, 1000, prompt, hasher, MAX_LEN, check,
                 Mix(new=0.1, admit=0.25, finish=0.32))
    assert hits >= 20, hits  # chunks were hit
    if kvs[0].chunks is not None:
        evicted = kvs[0].chunks.evictions
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

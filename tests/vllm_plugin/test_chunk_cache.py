"""Chunked COLD prefix caching (chunk_cache.py) against vLLM's own prefix cache at block
size 16, on vLLM's real block pools: random admissions of prompts that share documents
and earlier turns, preemptions (every block freed, the request admitted again) and
finishes. With room for everything, each lookup must find exactly the hit stock finds;
under eviction pressure, every block a hit returns must hold the K/V of its position
(a simulated cache records what each block was written with)."""

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

CHUNK = 16
MAX_LEN = 400


def _stock(num_blocks: int) -> KVCacheManager:
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return KVCacheManager(cfg, max_model_len=MAX_LEN, scheduler_block_size=16,
                          hash_block_size=16, enable_caching=True)


def _granikv(num_blocks: int) -> kvm.GraniKVCacheManager:
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    kv = KVCacheManager(cfg, max_model_len=MAX_LEN, scheduler_block_size=1,
                        hash_block_size=1, enable_caching=True)
    arena = kvm.reserve_arena(kv.block_pool, 16)
    return kvm.GraniKVCacheManager.adopt(kv, PrefixRegistry(HotPool(arena.start,
                                                                    arena.length)),
                                         arena, hash_chunk=CHUNK)


def _prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts on 5 shared documents, some of them a later turn of an earlier prompt."""
    docs = [[rng.randrange(1, 500) for _ in range(rng.randrange(8, 120))] for _ in range(5)]
    out: list[list[int]] = []
    for _ in range(n):
        base = rng.choice(out) if out and rng.random() < 0.3 else rng.choice(docs)
        out.append(base + [rng.randrange(1, 500) for _ in range(rng.randrange(1, 40))])
    return [p[:MAX_LEN - 1] for p in out]


def _admit(kv: Any, req: Request) -> int | None:
    blocks, n, _ = kv.get_computed_blocks(req)
    got = kv.allocate_slots(req, req.num_tokens - n, n, blocks)
    if got is None:
        return None
    req.num_computed_tokens = req.num_tokens
    req.status = RequestStatus.RUNNING
    return n


def _preempt(kv: Any, req: Request) -> None:
    kv.free(req)
    req.status = RequestStatus.PREEMPTED
    req.num_computed_tokens = 0
    req.num_preemptions += 1


@pytest.mark.parametrize("seed", range(4))
def test_hits_are_stocks_hits(seed: int) -> None:
    init_none_hash(sha256)
    rng = random.Random(seed)
    stock, gk = _stock(4000), _granikv(60000)
    hashers = (get_request_block_hasher(16, sha256), get_request_block_hasher(CHUNK, sha256))
    live: list[tuple[Request, Request]] = []
    sp = SamplingParams(max_tokens=8)
    hits = 0
    for i, prompt in enumerate(_prompts(rng, 120)):
        pair = tuple(Request(f"r{i}", list(prompt), sp, None, block_hasher=h)
                     for h in hashers)
        got = [_admit(kv, r) for kv, r in zip((stock, gk), pair)]
        assert got[0] is not None and got[0] == got[1], (i, got)
        hits += got[0] > 0
        live.append(pair)  # type: ignore[arg-type]
        if rng.random() < 0.2:  # preempted, then admitted again: the same hit
            for kv, r in zip((stock, gk), live[-1]):
                _preempt(kv, r)
            again = [_admit(kv, r) for kv, r in zip((stock, gk), live[-1])]
            assert again[0] == again[1] and again[0] is not None and again[0] >= got[0]
        while live and rng.random() < 0.5:  # finishes, in any order
            for kv, r in zip((stock, gk), live.pop(rng.randrange(len(live)))):
                kv.free(r)
    assert hits > 30  # the workload does share prefixes


@pytest.mark.parametrize("seed", range(4))
def test_hit_blocks_hold_their_positions_kv_under_eviction(seed: int) -> None:
    init_none_hash(sha256)
    rng = random.Random(100 + seed)
    gk = _granikv(900)  # a few requests' worth: cached chunks are evicted all the time
    hasher = get_request_block_hasher(CHUNK, sha256)
    written: dict[int, tuple[int, ...]] = {}  # block id -> the prefix it holds K/V for
    live: list[Request] = []
    sp = SamplingParams(max_tokens=8)
    hits = evicted = 0
    for i, prompt in enumerate(_prompts(rng, 300)):
        req = Request(f"r{i}", list(prompt), sp, None, block_hasher=hasher)
        while True:
            blocks, n, _ = gk.get_computed_blocks(req)
            ids = [b.block_id for b in blocks.blocks[0]]
            assert n == len(ids) and n % CHUNK == 0 and n < req.num_tokens
            for pos, b in enumerate(ids):
                assert written.get(b) == tuple(prompt[:pos + 1]), (i, pos, b)
            if gk.allocate_slots(req, req.num_tokens - n, n, blocks) is not None:
                break
            assert live, "an empty pool must fit one request"
            _preempt(gk, live.pop(0))  # no room: the oldest gives its blocks back
        (held,) = gk.get_block_ids(req.request_id)
        for pos in range(n, req.num_tokens):  # the prefill writes its own positions
            written[held[pos]] = tuple(prompt[:pos + 1])
        req.num_computed_tokens = req.num_tokens
        req.status = RequestStatus.RUNNING
        gk.coordinator.cache_blocks(req, req.num_tokens)
        hits += n > 0
        live.append(req)
        while len(live) > 3 or (live and rng.random() < 0.3):
            gk.free(live.pop(rng.randrange(len(live))))
    assert gk.chunks is not None
    evicted = gk.chunks.evictions
    assert hits > 50 and evicted > 50, (hits, evicted)

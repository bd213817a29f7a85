"""GraniKV KV managers without a model, and one random sequence of KV-manager calls
driven through two managers at once, as the
scheduler makes them: admissions (with prefix-cache hits), prefill chunks, decode steps,
preemptions when the pool runs dry, and finishes. Both managers must answer each call
alike; ``check`` compares their state after every call."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request, RequestStatus

from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixRegistry
from granikv_engine.vllm_plugin.core import kv_manager as kvm


def granikv_manager(num_blocks: int, max_len: int, *, hash_chunk: int = 1,
                    fast_alloc: bool = True, events: bool = False,
                    zeroing: bool | None = None) -> kvm.GraniKVCacheManager:
    """A GraniKV KV manager on vLLM's real block pool at block size 1, with a 16-block
    HOT arena. ``zeroing``: force the record of new blocks for the worker to zero (vLLM
    keeps it only beside Mamba layers, which GraniKV's one KV group never has)."""
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    kv = KVCacheManager(cfg, max_model_len=max_len, scheduler_block_size=1,
                        hash_block_size=1, enable_caching=True,
                        enable_kv_cache_events=events)
    arena = kvm.reserve_arena(kv.block_pool, 16)
    if zeroing is not None:
        kv.coordinator.single_type_managers[0]._record_new_block_ids = zeroing
    return kvm.GraniKVCacheManager.adopt(
        kv, PrefixRegistry(HotPool(arena.start, arena.length)), arena,
        fast_alloc=fast_alloc, hash_chunk=hash_chunk)


class Twin:
    """One request as each manager sees it (requests carry their own state)."""

    def __init__(self, rid: str, prompt: list[int], hasher: Any, max_len: int) -> None:
        sp = SamplingParams(max_tokens=max_len)
        self.reqs = [Request(rid, list(prompt), sp, None, block_hasher=hasher)
                     for _ in range(2)]

    def each(self, fn: Any) -> list[Any]:
        return [fn(i, r) for i, r in enumerate(self.reqs)]


@dataclass(frozen=True)
class Mix:
    """How often each call comes (cumulative thresholds of one uniform draw)."""

    new: float = 0.08  # a request arrives
    admit: float = 0.2  # the oldest waiting one is admitted
    finish: float = 0.25  # a running one finishes; above: a step of a running one


def drive(kvs: list[Any], rng: random.Random, calls: int, prompt: Callable[[], list[int]],
          hasher: Any, max_len: int, check: Callable[[list[str]], None],
          mix: Mix = Mix()) -> int:
    """Make ``calls`` random calls; returns how many admissions found a prefix hit."""
    running: list[Twin] = []
    waiting: list[Twin] = []
    hits = n = 0
    for _ in range(calls):
        op = rng.random()
        if op < mix.new or not (running or waiting):
            waiting.append(Twin(f"r{n}", prompt(), hasher, max_len))
            n += 1
            continue
        if op < mix.admit and waiting:  # admit the oldest waiting request, as the scheduler
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
                return hit, None if got is None else got.get_block_ids()

            outs = t.each(admit)
            assert outs[0] == outs[1]
            hits += outs[0][0] > 0
            if outs[0][1] is not None:
                running.append(waiting.pop(0))
        elif op < mix.finish and running:  # a request finishes
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
            if outs[0] is None or t.reqs[0].num_tokens >= max_len - 1:  # preempt / done
                running.remove(t)
                t.each(lambda i, r: kvs[i].free(r))
                if outs[0] is None:
                    for r in t.reqs:
                        r.status = RequestStatus.PREEMPTED
                        r.num_computed_tokens = 0
                    waiting.append(t)
        check([t.reqs[0].request_id for t in running])
    return hits

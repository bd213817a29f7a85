"""A fast path for vLLM's ``KVCacheManager.allocate_slots`` for running requests, at
block size 1.

At block size 1 every running request needs a new block on every decode step, so the
engine core calls ``allocate_slots`` once per request per step (256 times a step on W1,
stock vLLM at block 16 needs one call in 16 to allocate anything). The stock call goes
through the coordinator's generic layers: skipped-block removal, a count of the blocks
to allocate that handles prefix hits, external (connector) tokens and encoder tokens,
and a per-manager loop for hybrid models. On a CPU profile of GraniKV's engine core,
``allocate_slots`` took 45% of ``schedule()`` plus ``update_from_output()``.

For the case the running loop hands it (a RUNNING request that already holds blocks, no
new prefix hit, no lookahead, connector, encoder or admission arguments; one plain
full-attention manager at block size 1) this does the same work directly, with the same
functions for what has effects: ``BlockPool.get_new_blocks``, the manager's block list
and new-block record (the worker zeroes those blocks), and the pool's
hash insert for the new full blocks (``cache_blocks`` below; vLLM's own
``cache_blocks`` when KV events are on). Anything else returns ``NOT_HANDLED`` and takes the
stock path. ``tests/vllm_plugin/test_fast_alloc.py`` runs
random sequences of calls through both and compares every piece of state.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
from vllm.v1.request import Request, RequestStatus

NOT_HANDLED: Any = object()  # "not the fast path's case": call the stock allocate_slots
# allocate_slots' keyword arguments and the values the fast path handles
DEFAULTS = {"num_new_computed_tokens": 0, "new_computed_blocks": None,
            "num_lookahead_tokens": 0, "num_external_computed_tokens": 0,
            "delay_cache_blocks": False, "num_encoder_tokens": 0,
            "full_sequence_must_fit": False, "reserved_blocks": 0}
# what the scheduler's running loop passes (no speculative decoding): checked first
RUNNING_LOOP = {"num_lookahead_tokens": 0}


def plain_manager(kv: Any) -> FullAttentionManager | None:
    """The manager's one full-attention manager at block size 1, or None (then the
    fast path never applies)."""
    managers = kv.coordinator.single_type_managers
    if len(managers) != 1 or type(managers[0]) is not FullAttentionManager:
        return None
    m: FullAttentionManager = managers[0]
    return m if m.block_size == 1 else None


def allocate_running(kv: Any, m: FullAttentionManager, request: Request,
                     num_new_tokens: int, kwargs: dict[str, Any]) -> KVCacheBlocks | None:
    """``kv.allocate_slots(request, num_new_tokens, **kwargs)`` for a running request,
    or ``NOT_HANDLED`` when the call is not the case this path handles."""
    rid = request.request_id
    if (num_new_tokens <= 0 or request.status is not RequestStatus.RUNNING
            or rid not in m.num_cached_block or rid in m._partial_hit_reqs
            or (kwargs != RUNNING_LOOP and not _defaults(kwargs))):
        return NOT_HANDLED
    computed = min(request.num_computed_tokens, kv.max_model_len)
    blocks = m.req_to_blocks[rid]
    # one block a token: the blocks it needs beyond those it holds
    need = min(computed + num_new_tokens, kv.max_model_len) - len(blocks)
    if need > kv.block_pool.get_num_free_blocks():
        return None
    new = kv.block_pool.get_new_blocks(need) if need > 0 else []
    if new:
        blocks.extend(new)
        if m._record_new_block_ids:
            m.new_block_ids.extend(b.block_id for b in new)
    if kv.enable_caching:
        cache_blocks(kv, m, request, min(computed + num_new_tokens, request.num_tokens))
    result: KVCacheBlocks = kv.create_kv_cache_blocks((new,))
    return result


def _defaults(kwargs: dict[str, Any]) -> bool:
    """Whether the call's keyword arguments are all ones the fast path handles."""
    return (set(kwargs) <= DEFAULTS.keys() | {"has_scheduled_reqs"}
            and all(kwargs.get(k, v) == v for k, v in DEFAULTS.items()))


def cache_blocks(kv: Any, m: FullAttentionManager, request: Request, num_tokens: int) -> None:
    """``m.cache_blocks(request, num_tokens)`` for the plain case, directly: the new
    full blocks (at block size 1, one per token; on a decode step, one) enter the
    prefix cache under the request's block hashes, through the pool's own insert.

    vLLM's path goes through the manager's and the pool's generic layers (the reachable
    mask, which full attention does not have; hash-size resolution; partial tails;
    KV events). With KV events on or a hash size other than 1, the stock call runs; a
    new block that already carries a hash (a partial block's promotion, which block
    size 1 does not have) hands the rest to it."""
    if kv.chunks is not None:  # chunked hashing: the manager's own (chunk_cache.py)
        m.cache_blocks(request, num_tokens)
        return
    rid = request.request_id
    done = m.num_cached_block.get(rid, 0)
    if done >= num_tokens:
        return
    pool = kv.block_pool
    if (pool.enable_kv_cache_events or pool.hash_block_size != 1
            or len(request.block_hashes) < num_tokens):
        m.cache_blocks(request, num_tokens,
                       retention_interval=kv.coordinator.retention_interval)
        return
    blocks, hashes, gid = m.req_to_blocks[rid], request.block_hashes, m.kv_cache_group_id
    for i in range(done, num_tokens):
        blk = blocks[i]
        if blk.block_hash is not None:  # the stock call takes it from here
            m.num_cached_block[rid] = i
            m.cache_blocks(request, num_tokens,
                           retention_interval=kv.coordinator.retention_interval)
            return
        if not blk.is_null:
            pool._insert_block_hash(make_block_hash_with_group_id(hashes[i], gid), blk,
                                    num_tokens=i + 1)
    m.num_cached_block[rid] = num_tokens

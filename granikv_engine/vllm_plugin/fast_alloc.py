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
and new-block record (the worker zeroes those blocks), and the manager's
``cache_blocks`` (hashing into the prefix cache, KV events). Anything else returns
``STOCK`` and takes the stock path. ``tests/vllm_plugin/test_fast_alloc.py`` runs
random sequences of calls through both and compares every piece of state.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
from vllm.v1.request import Request, RequestStatus

STOCK: Any = object()  # "not the fast path's case": call the stock allocate_slots
# allocate_slots' keyword arguments and the values the fast path handles
DEFAULTS = {"num_new_computed_tokens": 0, "new_computed_blocks": None,
            "num_lookahead_tokens": 0, "num_external_computed_tokens": 0,
            "delay_cache_blocks": False, "num_encoder_tokens": 0,
            "full_sequence_must_fit": False, "reserved_blocks": 0}


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
    or ``STOCK`` when the call is not the case this path handles."""
    rid = request.request_id
    if (num_new_tokens <= 0 or request.status is not RequestStatus.RUNNING
            or rid not in m.num_cached_block or rid in m._partial_hit_reqs
            or any(kwargs.get(k, v) != v for k, v in DEFAULTS.items())
            or not set(kwargs) <= DEFAULTS.keys() | {"has_scheduled_reqs"}):
        return STOCK
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
        m.cache_blocks(request, min(computed + num_new_tokens, request.num_tokens),
                       retention_interval=kv.coordinator.retention_interval)
    result: KVCacheBlocks = kv.create_kv_cache_blocks((new,))
    return result

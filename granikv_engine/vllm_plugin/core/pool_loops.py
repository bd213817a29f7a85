"""vLLM's ``BlockPool`` per-block loops, each done in one pass, and ``touch`` that skips
a hit's HOT head.

At block size 1 every token is a block, so the pool's per-block Python is paid per
token: ``get_new_blocks`` walks the free queue in ``popleft_n``, then walks the blocks
again to call ``_maybe_evict_cached_block`` (a method call a block) and count a
reference; ``free_blocks`` sorts the blocks into two lists, then ``prepend_n`` and
``append_n`` walk each list to link it into the queue; ``touch`` calls the queue's
``remove`` for each block. Stock vLLM at block 16 pays the same per 16 tokens.

Here each is one loop that does the same updates to the same objects: the free queue's
links and count, each block's reference count, and, with COLD caching in chunks, the
chunk cache's eviction of a reused block (``ChunkCache.drop``, called only for a block
that carries a hash: a block's hash is the only place the chunk cache marks it). With
vLLM's own prefix cache (one hash a token) ``get_new_blocks`` stays vLLM's, whose
eviction looks up every block. ``touch`` skips a ``HotRun``'s HOT head (those blocks
hold their own references): O(1) per HOT hit instead of O(Lp). The results are the stock
calls' results, in the same order; ``tests/vllm_plugin/test_pool_loops.py`` runs random
sequences through both and compares the queue, every block and the cache.

The stock call runs instead whenever something else watches blocks: a KV-cache metrics
collector or KV-cache events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any

from vllm.v1.core.kv_cache_utils import KVCacheBlock


def install(pool: Any, hot_len: Callable[[Sequence[KVCacheBlock]], int],
            evict: Callable[[KVCacheBlock], Any] | None = None) -> None:
    """Replace ``pool``'s ``free_blocks`` and ``touch`` on this instance, and with
    ``evict`` its ``get_new_blocks``. ``hot_len(blocks)``: how many leading blocks
    ``touch`` skips. ``evict(block)``: drop the cached chunk of a block about to be
    reused (the block carries a hash); None: vLLM's prefix cache, and its own
    ``get_new_blocks``."""
    drop = evict or _no_chunks
    queue = pool.free_block_queue
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    stock_new, stock_free, stock_touch = pool.get_new_blocks, pool.free_blocks, pool.touch

    def watched() -> bool:
        return bool(pool.metrics_collector) or pool.enable_kv_cache_events

    def get_new_blocks(num_blocks: int) -> list[KVCacheBlock]:
        if watched() or not pool.enable_caching:
            return stock_new(num_blocks)  # type: ignore[no-any-return]
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if num_blocks <= 0:
            return []
        queue.num_free_blocks -= num_blocks
        out: list[KVCacheBlock] = []
        add = out.append
        block = head.next_free_block
        for _ in range(num_blocks):
            add(block)
            nxt = block.next_free_block
            block.prev_free_block = block.next_free_block = None
            if block._block_hash is not None:
                drop(block)
            if block.ref_cnt:
                raise RuntimeError(f"free block {block.block_id} has references")
            block.ref_cnt = 1
            block = nxt
        head.next_free_block = block
        block.prev_free_block = head
        return out

    def free_blocks(ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Blocks without a hash go to the front of the queue in their order (they are
        reused first), blocks with one to the back in theirs, as ``free_blocks`` does."""
        if watched():
            stock_free(ordered_blocks)
            return
        front_first = front_last = None  # the chain that goes in front
        back = tail.prev_free_block  # the queue's last block: the chain goes after it
        n = 0
        for block in ordered_blocks:
            rc = block.ref_cnt - 1
            block.ref_cnt = rc
            if rc == 0 and not block.is_null:
                n += 1
                if block._block_hash is None:
                    if front_last is None:
                        front_first = block
                    else:
                        front_last.next_free_block = block
                        block.prev_free_block = front_last
                    front_last = block
                else:
                    back.next_free_block = block
                    block.prev_free_block = back
                    back = block
        back.next_free_block = tail
        tail.prev_free_block = back
        if front_first is not None:
            assert front_last is not None
            first = head.next_free_block
            head.next_free_block = front_first
            front_first.prev_free_block = head
            front_last.next_free_block = first
            first.prev_free_block = front_last
        queue.num_free_blocks += n

    def touch(blocks: Sequence[KVCacheBlock]) -> None:
        skip = hot_len(blocks)
        if watched():
            stock_touch(blocks[skip:] if skip else blocks)
            return
        removed = 0
        for block in islice(blocks, skip, None) if skip else blocks:
            rc = block.ref_cnt
            if not rc and not block.is_null:  # queued: take it out
                prev, nxt = block.prev_free_block, block.next_free_block
                if prev is None or nxt is None:
                    raise RuntimeError(f"touch: block {block.block_id} is not queued")
                prev.next_free_block = nxt
                nxt.prev_free_block = prev
                block.prev_free_block = block.next_free_block = None
                removed += 1
            block.ref_cnt = rc + 1
        queue.num_free_blocks -= removed

    if evict is not None:
        pool.get_new_blocks = get_new_blocks
    pool.free_blocks = free_blocks
    pool.touch = touch


def _no_chunks(block: KVCacheBlock) -> None:
    raise AssertionError("get_new_blocks is vLLM's own without a chunk cache")

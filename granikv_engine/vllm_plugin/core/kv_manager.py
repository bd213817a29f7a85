"""HOT-aware KV cache manager: vLLM's ``KVCacheManager`` with a reserved HOT arena.

Block ids ``[arena.start, arena.end)`` are taken out of vLLM's free queue at start-up
and hold one reservation reference each for the life of the engine; the ``HotPool``
owns them. Everything else is the COLD pool: vLLM's own ``BlockPool`` at block size 1.

- A *fill* request (registration) gets the prefix's HOT blocks as its blocks, so its
  prefill writes the prefix K/V there. They are marked cached up front, so vLLM never
  hashes them into its prefix-cache map.
- A *hit* request gets the HOT blocks as computed blocks (``num_computed = Lp``), then
  any stock prefix-cache continuation, then COLD blocks for its own tokens.
- HOT blocks are never touched nor freed per block: a request holds one ``HotPool``
  reference, taken and dropped in O(1).
- COLD prefix caching hashes and looks up per chunk of tokens (``chunk_cache.py``); a
  HOT hit then covers the prefix's whole chunks, so that the request's COLD chunks
  (an agent's earlier turns) start on a chunk boundary and can hit too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.block_pool import BlockHashToBlockMap
from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
from vllm.v1.core.kv_cache_utils import KVCacheBlock, KVCacheBlockCopy
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
from vllm.v1.request import Request

from granikv_engine.hot_pool import SlotRange
from granikv_engine.prefix_registry import PrefixRecord, PrefixRegistry, PrefixState
from granikv_engine.vllm_plugin.core import pool_loops
from granikv_engine.vllm_plugin.core.binding import starts_with
from granikv_engine.vllm_plugin.core.chunk_cache import ChunkCache
from granikv_engine.vllm_plugin.core.fast_alloc import NOT_HANDLED, allocate_running, plain_manager
from granikv_engine.vllm_plugin.core.implicit import Promoter

logger = init_logger(__name__)


class HotRun(list):  # type: ignore[type-arg]
    """Computed blocks whose first ``hot_len`` entries are HOT: touch only the rest."""

    hot_len: int = 0


class HotBlocks(KVCacheBlocks):
    """A request's blocks whose first ``hot_len`` are the HOT range from ``hot_start``:
    their ids come from a ``range``, not from 16K block objects, one at a time."""

    hot_ids: tuple[int, ...] | list[int] = ()  # built once per prefix, shared, read-only

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...]:
        (blocks,) = self.blocks
        n = len(self.hot_ids)
        return (list(self.hot_ids) + [b.block_id for b in blocks[n:]],)


@dataclass(frozen=True)
class Intent:
    """What the scheduler decided for a request when it arrived."""

    prefix_id: str
    fill: bool  # True: registration; False: a hit on a READY prefix
    record: PrefixRecord  # the record it was bound to (its id may name another later)


@dataclass
class Held:
    record: PrefixRecord  # the record read (or filled): released to it, even if replaced
    start: int  # first HOT slot
    hot_len: int  # leading HOT blocks of the request's block list
    fill: bool


@dataclass
class HotCounters:
    hits: int = 0
    hit_tokens: int = 0
    cold_fallbacks: int = 0  # named a prefix that was not READY in HOT
    cold_replaced: int = 0  # of those: its id was registered again with other tokens
    implicit_hits: int = 0  # of the hits: on a prefix the engine promoted (unregistered)


class GraniKVCacheManager(KVCacheManager):
    """Adopted in place by ``GraniKVScheduler`` (see ``adopt``)."""

    registry: PrefixRegistry
    arena: SlotRange
    intents: dict[str, Intent]
    held: dict[str, Held]
    hot_counters: HotCounters
    _hot_ids_key: tuple[int, int]
    _hot_ids: list[int]
    _fast: FullAttentionManager | None
    chunks: ChunkCache | None  # None: vLLM's prefix cache, one hash a token
    chunk: int
    promoter: Promoter | None  # implicit HOT (chunked caching only)

    @classmethod
    def adopt(cls, manager: KVCacheManager, registry: PrefixRegistry,
              arena: SlotRange, fast_alloc: bool = True,
              hash_chunk: int = 1) -> GraniKVCacheManager:
        """Turn the scheduler's stock manager into this class. The Scheduler builds its
        manager inline with a dozen arguments; adopting keeps that call the stock one.
        ``fast_alloc``: running requests' allocations take ``fast_alloc.py``'s path.
        ``hash_chunk`` > 1: the request hasher hashes per that many tokens, and COLD
        prefix caching works in chunks (``chunk_cache.py``); the scheduler passes 1 when
        something else reads per-block hashes (KV-cache events, a KV connector)."""
        if manager.num_kv_cache_groups != 1:
            raise ValueError("GraniKV supports models with one KV cache group")
        manager.__class__ = cls
        me: GraniKVCacheManager = manager  # type: ignore[assignment]
        me.registry, me.arena = registry, arena
        me._fast = plain_manager(me) if fast_alloc else None
        me.chunk, me.chunks, me.promoter = 1, None, None
        if hash_chunk > 1 and me.enable_caching:
            me.chunk, me.chunks = hash_chunk, ChunkCache(me.block_pool, hash_chunk)
            (single,) = me.coordinator.single_type_managers
            single.cache_blocks = _chunk_cacher(single, me.chunks)  # type: ignore[method-assign]
        me.intents, me.held, me.hot_counters = {}, {}, HotCounters()
        me._hot_ids_key, me._hot_ids = (0, 0), []
        # the pool's per-block loops in one pass each; touch skips a hit's HOT head
        pool_loops.install(me.block_pool, _hot_len,
                           me.chunks.drop if me.chunks is not None else None)
        for single in me.coordinator.single_type_managers:
            single._get_num_evictable_blocks = _evictable_counter(arena, me.chunk)  # type: ignore[method-assign]
        return me

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        held = self.held.get(request_id)
        (blocks,) = self.coordinator.get_blocks(request_id)
        if held is None or not blocks or blocks[0].block_id != held.start:
            return super().get_blocks(request_id)
        out = HotBlocks((blocks,))
        key = (held.start, held.hot_len)
        if self._hot_ids_key != key:  # requests of one prefix arrive together
            self._hot_ids_key, self._hot_ids = key, list(range(held.start,
                                                               held.start + held.hot_len))
        out.hot_ids = self._hot_ids
        return out

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       *args: Any, **kwargs: Any) -> KVCacheBlocks | None:
        if self._fast is not None and not args:
            got = allocate_running(self, self._fast, request, num_new_tokens, kwargs)
            if got is not NOT_HANDLED:
                return got  # type: ignore[no-any-return]
        return super().allocate_slots(request, num_new_tokens, *args, **kwargs)

    # ---- lookups --------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> tuple[KVCacheBlocks, int, int]:
        intent = self.intents.get(request.request_id)
        if intent is None and self.promoter is not None:
            intent = self._implicit_intent(request)
        if intent is None:
            got = self._cold_hit(request)
            promoter = self.promoter
            if promoter is None or not got[1] or not promoter.observe(request, got[1]):
                return got
            # its hit made the head due: promoted now, and this request reads it
            if not promoter.run(self) or (intent := self._implicit_intent(request)) is None:
                return got
        held = self.held.get(request.request_id) or self._take(request, intent)
        if held is None:
            self.hot_counters.cold_fallbacks += 1
            return self._cold_hit(request)
        run = HotRun(self.block_pool.blocks[held.start:held.start + held.hot_len])
        run.hot_len = held.hot_len
        if held.fill:
            return KVCacheBlocks((run,)), 0, 0
        extra, n_extra = self._continue_hit(request, held.hot_len)
        run.extend(extra)
        if self.log_stats and self.prefix_cache_stats is not None:
            self.prefix_cache_stats.record(num_tokens=request.num_tokens,
                                           num_hits=held.hot_len + n_extra,
                                           preempted=request.num_preemptions > 0)
        self.hot_counters.hits += 1
        self.hot_counters.hit_tokens += held.hot_len
        self.hot_counters.implicit_hits += held.record.implicit
        return KVCacheBlocks((run,)), held.hot_len + n_extra, 0

    def _take(self, request: Request, intent: Intent) -> Held | None:
        """Take the HOT reference for a request, once per (re)admission. A fill writes
        the record it registered, unless that was replaced or unregistered since; a hit
        reads what its id names now, if its prompt starts with those tokens (the id may
        have been registered again with other tokens since the request arrived)."""
        if intent.fill:
            rec = intent.record
            if rec.state is not PrefixState.FILLING or rec.hot is None or rec.doomed:
                return None
            held = Held(rec, rec.hot.start, rec.length, True)
        else:
            try:
                rec = self.registry.get(intent.prefix_id, None)
            except KeyError:
                return None
            if rec is not intent.record and not starts_with(request.prompt_token_ids or (),
                                                            rec.tokens):
                self.hot_counters.cold_replaced += 1
                return None
            if rec.state is not PrefixState.READY:
                return None
            hot = self.registry.acquire(rec.prefix_id)
            if hot is None:
                return None
            # At least one prompt token must be computed to produce logits. COLD
            # chunks start on a chunk boundary: a prefix of a chunk or more is read in
            # whole chunks (a shorter one whole, with no COLD hit after it).
            hot_len = min(rec.length, request.num_tokens - 1)
            if hot_len >= self.chunk:
                hot_len -= hot_len % self.chunk
            held = Held(rec, hot.start, hot_len, False)
        self.held[request.request_id] = held
        return held

    def _continue_hit(self, request: Request, hot_len: int) -> tuple[list[KVCacheBlock], int]:
        """Stock prefix-cache hits after the HOT prefix (e.g. an agent's earlier turns).
        The hash chain already fingerprints the prefix, so the lookup starts at Lp."""
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return [], 0
        if self.chunks is not None:
            if hot_len % self.chunk:  # a short HOT run: its chunk holds HOT blocks
                return [], 0
            got = self.chunks.lookup(request.block_hashes, hot_len // self.chunk,
                                     request.num_tokens - 1 - hot_len)
            return got, len(got)
        hashes = request.block_hashes[hot_len:]
        if not hashes:
            return [], 0
        blocks, n, _ = self.coordinator.find_longest_cache_hit(
            hashes, request.num_tokens - 1 - hot_len)
        return list(blocks[0]), n

    def _implicit_intent(self, request: Request) -> Intent | None:
        """Bind a request that arrived unbound to an implicit prefix promoted since."""
        assert self.promoter is not None
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return None
        rec = self.promoter.match(request)
        if rec is None:
            return None
        intent = Intent(rec.prefix_id, False, rec)
        self.intents[request.request_id] = intent
        return intent

    def _cold_hit(self, request: Request) -> tuple[KVCacheBlocks, int, int]:
        """vLLM's prefix-cache lookup, in chunks when hashing is chunked."""
        if self.chunks is None:
            return super().get_computed_blocks(request)
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0, 0
        got = self.chunks.lookup(request.block_hashes, 0, request.num_tokens - 1)
        if self.log_stats and self.prefix_cache_stats is not None:
            self.prefix_cache_stats.record(num_tokens=request.num_tokens, num_hits=len(got),
                                           preempted=request.num_preemptions > 0)
        return self.create_kv_cache_blocks((got,)), len(got), 0

    # ---- freeing ----------------------------------------------------------------------
    def free(self, request: Request) -> None:
        blocks = self.pop_blocks_for_free(request)
        self.block_pool.free_blocks(reversed(blocks))

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """The request's COLD blocks; its HOT blocks stay with the HotPool."""
        blocks = super().pop_blocks_for_free(request)
        held = self.held.pop(request.request_id, None)
        if held is None:
            return blocks
        if blocks and blocks[0].block_id == held.start:
            blocks = blocks[held.hot_len:]
        if not held.fill:
            self.registry.release(held.record)
        return blocks

    def estimate_cached_tokens(self, request: Request) -> int:
        """Prefill statistics: the HOT prefix counts as cached; only the COLD blocks after
        it are looked at (stock walks every block: 16K a request on a 16K prefix)."""
        held = self.held.get(request.request_id)
        if held is None:
            return super().estimate_cached_tokens(request)
        (blocks,) = self.coordinator.get_blocks(request.request_id)
        tail = max((b.block_hash_num_tokens or 0 for b in blocks[held.hot_len:]), default=0)
        return max(held.hot_len, tail)

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        """Only vLLM's own batch-global cascade reads this, and GraniKV turns it off;
        the stock scan walks the first running request's blocks every step."""
        return [0] * self.num_kv_cache_groups

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[KVCacheBlock]]:
        """vLLM's copy-on-write channel also carries HOT compactions: the worker copies
        every (src, dst) block pair, all sources read before any write, before the
        step's forward pass. Moved prefixes are unreferenced, so nothing reads them."""
        copies, retained = super().take_kv_cache_block_copies()
        for m in self.registry.take_moves():
            copies.extend(KVCacheBlockCopy(m.src + i, m.dst + i) for i in range(m.length))
        if self.promoter is not None:  # implicit prefixes' K/V, from their COLD blocks
            more, held = self.promoter.take()
            copies.extend(more)
            retained.extend(held)
        return copies, retained

    def forget(self, request_id: str) -> None:
        self.intents.pop(request_id, None)

    # ---- pool-wide ----------------------------------------------------------------------
    @property
    def cold_capacity(self) -> int:
        return self.block_pool.num_gpu_blocks - 1 - self.arena.length

    @property
    def usage(self) -> float:
        """COLD usage only: the reserved HOT arena is not 'used' KV cache."""
        cap = self.cold_capacity
        return 0.0 if cap <= 0 else 1.0 - self.block_pool.get_num_free_blocks() / cap

    def reset_prefix_cache(self) -> bool:
        bp = self.block_pool
        if bp.get_num_free_blocks() != self.cold_capacity:
            logger.warning("GraniKV: cannot reset the prefix cache while COLD blocks are "
                           "in use (%d)", self.cold_capacity - bp.get_num_free_blocks())
            return False
        bp.cached_block_hash_to_block = BlockHashToBlockMap()
        bp.cached_block_hashes_by_block.clear()
        if self.chunks is not None:
            self.chunks.clear()
        for block in bp.blocks:
            block.reset_hash()
        if bp.metrics_collector:
            bp.metrics_collector.reset()
        return True

    def evict_blocks(self, block_ids: set[int]) -> None:
        a = self.arena
        super().evict_blocks({b for b in block_ids if not a.start <= b < a.end})


def _chunk_cacher(single: Any, chunks: ChunkCache) -> Any:
    """The full-attention manager's ``cache_blocks``, in chunks."""

    def cache_blocks(request: Request, num_tokens: int,
                     retention_interval: int | None = None) -> None:
        rid = request.request_id
        done = single.num_cached_block.get(rid, 0)
        if done < num_tokens:
            single.num_cached_block[rid] = chunks.insert(
                request.block_hashes, single.req_to_blocks[rid], done, num_tokens)

    return cache_blocks


def _hot_len(blocks: Sequence[KVCacheBlock]) -> int:
    """How many leading blocks of a hit are HOT (``touch`` skips them)."""
    return blocks.hot_len if isinstance(blocks, HotRun) else 0


def _evictable_counter(arena: SlotRange, chunk: int) -> Any:
    """Counts evictable (free-queue) blocks among a hit's computed blocks, skipping the
    leading HOT run (never evictable: each holds its reservation reference) instead of
    walking its Lp blocks. With chunked caching a hit's COLD blocks are whole chunks
    after a chunk-aligned HOT run, and a chunk's blocks share one reference count (they
    are taken and freed together): one block a chunk is looked at."""
    start, end = arena.start, arena.end

    def count(blocks: Sequence[KVCacheBlock]) -> int:
        n = 0
        if chunk > 1 and len(blocks) % chunk == 0:
            for i in range(len(blocks) - 1, -1, -chunk):
                b = blocks[i]
                if start <= b.block_id < end:
                    break
                n += chunk if b.ref_cnt == 0 else 0
            return n
        for b in reversed(blocks):  # HOT blocks come first; the COLD tail is short
            if start <= b.block_id < end:
                break
            n += b.ref_cnt == 0 and not b.is_null
        return n

    return count


def reserve_arena(block_pool: Any, capacity: int) -> SlotRange:
    """Take ``capacity`` blocks off the head of a fresh free queue: ids 1..capacity."""
    if capacity <= 0:
        return SlotRange(1, 0)
    if block_pool.get_num_free_blocks() < capacity + 1:
        raise ValueError(f"HOT arena of {capacity} blocks does not fit a pool of "
                         f"{block_pool.get_num_free_blocks()} free blocks")
    blocks = block_pool.free_block_queue.popleft_n(capacity)
    ids = [b.block_id for b in blocks]
    if ids != list(range(ids[0], ids[0] + capacity)):
        raise RuntimeError("the free queue is not in id order; reserve the arena at start-up")
    for b in blocks:
        b.ref_cnt += 1  # the reservation's reference: never in the free queue again
    return SlotRange(ids[0], capacity)

"""COLD prefix caching in chunks: hashed and looked up per ``chunk`` tokens, allocated
per token.

At block size 1 vLLM's prefix cache hashes every prompt token (a sha256 chain),
looks each one up and inserts each computed one: 16 times stock's work at block 16, on
the engine core's one thread. Here ``request.block_hashes`` holds one hash per
``chunk`` tokens (vLLM's own hasher at ``hash_block_size=chunk``: the same chain stock
computes at block 16), and the cache maps a chunk's hash to its ``chunk`` blocks. A hit
is a whole number of chunks, as stock's is a whole number of blocks.

Blocks stay vLLM's: a cached chunk's blocks carry the chunk's hash as their
``block_hash`` (so ``free_blocks`` queues them as cached, least recently used first),
and the pool's eviction hook drops the whole chunk when any of its blocks is reused. A
chunk's blocks are always taken (``touch``) and freed together, so when one is
evicted all are free. Blocks of the HOT arena are never part of a chunk: a request's
chunks start at its first COLD block (``GraniKVCacheManager`` keeps HOT hits
chunk-aligned so that they line up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.v1.core.kv_cache_utils import KVCacheBlock


class ChunkCache:
    def __init__(self, block_pool: Any, chunk: int) -> None:
        if chunk < 2:
            raise ValueError(f"a chunk holds at least 2 tokens, got {chunk}")
        self.pool = block_pool
        self.chunk = chunk
        self.index: dict[Any, list[KVCacheBlock]] = {}
        self.evictions = 0
        self.fresh: set[Any] = set()  # chunks cached during this scheduling step
        block_pool._maybe_evict_cached_block = self._evict

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, hashes: Sequence[Any], first_chunk: int,
               max_tokens: int) -> list[KVCacheBlock]:
        """The cached blocks of the longest run of chunks ``hashes[first_chunk:]`` that
        is cached, at most ``max_tokens`` tokens' worth (whole chunks)."""
        get = self.index.get
        out: list[KVCacheBlock] = []
        last = min(len(hashes), first_chunk + max(max_tokens, 0) // self.chunk)
        for i in range(first_chunk, last):
            blocks = get(hashes[i])
            if blocks is None:
                break
            out += blocks
        return out

    def insert(self, hashes: Sequence[Any], blocks: Sequence[KVCacheBlock],
               cached_tokens: int, num_tokens: int) -> int:
        """Cache the chunks of a request that are full within its first ``num_tokens``
        computed tokens and start at or after ``cached_tokens`` (its blocks before that
        are cached already, or HOT). Returns the new cached-token mark."""
        c = self.chunk
        first = -(-cached_tokens // c)
        last = min(num_tokens // c, len(hashes), len(blocks) // c)
        index = self.index
        for k in range(first, last):
            h = hashes[k]
            if h in index:  # computed twice (two misses at once): one copy is cached
                continue
            run = list(blocks[k * c:(k + 1) * c])
            for b in run:
                if b._block_hash is not None or b.is_null:  # not this cache's to tag
                    break
            else:
                for b in run:
                    b._block_hash = h
                # the tokens the hash covers: read as a maximum over a request's blocks
                # (estimate_cached_tokens), so the chunk's last block carries it
                b._block_hash_num_tokens = (k + 1) * c
                index[h] = run
                self.fresh.add(h)
        return max(cached_tokens, last * c)

    def new_step(self) -> None:
        self.fresh.clear()

    def written(self, hashes: Sequence[Any]) -> bool:
        """Whether these chunks were all cached by earlier steps: their K/V is written
        before this step's forward pass (a chunk cached during this step is written by
        it, after anything that runs before it, such as block copies)."""
        fresh = self.fresh
        return not fresh or not any(h in fresh for h in hashes)

    def _evict(self, block: KVCacheBlock) -> bool:
        """The pool's ``_maybe_evict_cached_block``: ``block`` is being reused."""
        mc = self.pool.metrics_collector
        if mc:
            mc.on_block_evicted(block)
        return self.drop(block)

    def drop(self, block: KVCacheBlock) -> bool:
        """Uncache the chunk ``block`` belongs to, if it carries a hash."""
        h = block._block_hash
        if h is None:
            return False
        run = self.index.pop(h, None)
        if run is None:
            block._block_hash = block._block_hash_num_tokens = None
            return True
        for b in run:
            b._block_hash = None
        run[-1]._block_hash_num_tokens = None  # only the last block carries it
        self.evictions += 1
        return True

    def clear(self) -> None:
        for run in self.index.values():
            for b in run:
                b.reset_hash()
        self.index.clear()
        self.fresh.clear()

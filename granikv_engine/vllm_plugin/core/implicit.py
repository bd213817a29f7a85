"""Implicit HOT: prompt heads that requests share, promoted to HOT by the engine.

Nobody has to register anything. When requests of a team find the same COLD prefix-cache
hit (the same chain hash at its end: the same tokens, in whole hash chunks) at least
``min_hits`` times, and it is at least ``min_len`` tokens long, the head becomes an
implicit prefix (``PrefixRegistry.promote``): placed in the HOT arena within the
implicit budget, its K/V copied there from the COLD blocks that hold it, and READY at
once. Requests that start with it are then bound to it by prompt matching, as to a
registered prefix, so the cascade runs for them.

A request that arrived before its head was promoted (it waits in the queue, unbound) is
bound when it is first scheduled (``match``): its chain hash at the end of an implicit
prefix's last chunk equals that prefix's, which only the same tokens give.

Counting by the hit's end hash tells a shared head (many requests' hits end at the same
chunk) from one agent's growing history (each turn's hit ends further on). A head is
promoted as soon as its count is reached, in the middle of a scheduling step, and the
request whose hit reached it is bound to it at once, as is every later one: only the
requests scheduled before that read the head from COLD. The copies run before the
step's forward pass, so the source chunks must have been written by earlier steps: a
head with a chunk cached during this step (``ChunkCache.written``) waits for the start
of the next one. The source blocks are held by the copy until the step has run (vLLM's
``retained`` blocks), so nothing allocated later overwrites them first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.kv_cache_utils import KVCacheBlock, KVCacheBlockCopy

from granikv_engine.prefix_registry import PrefixRecord, PrefixRegistry, PrefixState
from granikv_engine.vllm_plugin.core.hasher import plain_hashing
from granikv_engine.vllm_plugin.request_args import GraniKVArgs

logger = init_logger(__name__)
TRACKED = 4096  # hit ends remembered (least recently seen forgotten first)


class Promoter:
    def __init__(self, registry: PrefixRegistry, budget: int, chunk: int, min_len: int,
                 min_hits: int, default_team: str) -> None:
        self.registry = registry
        self.budget = budget  # HOT slots implicit prefixes may hold together
        self.chunk = chunk
        self.min_len = max(min_len, chunk)
        self.min_hits = min_hits
        self.default_team = default_team
        self.seen: OrderedDict[tuple[str, Any], int] = OrderedDict()
        self.pending: dict[tuple[str, Any], tuple[str, tuple[int, ...], tuple[Any, ...]]] = {}
        self.copies: list[KVCacheBlockCopy] = []
        self.retained: list[KVCacheBlock] = []
        self._index_version = -1
        self._by_team: dict[str, list[PrefixRecord]] = {}  # READY implicit, longest first

    def _team(self, request: Any) -> str | None:
        """The request's team, or None when its hashes carry extra keys (LoRA,
        multimodal input, a cache salt, prompt embeddings) or its arguments are bad."""
        if not plain_hashing(request):
            return None
        sp = request.sampling_params
        try:
            args = GraniKVArgs.from_extra_args(sp.extra_args if sp is not None else None)
        except ValueError:
            return None
        return (args.team if args else None) or self.default_team

    def match(self, request: Any) -> PrefixRecord | None:
        """The longest READY implicit prefix of the request's team that its prompt starts
        with (and is longer than), by chain hash."""
        reg = self.registry
        if self._index_version != reg.version:
            self._index_version = reg.version
            self._by_team = {}
            for r in reg.records():
                if r.implicit and r.state is PrefixState.READY and r.block_hashes:
                    self._by_team.setdefault(r.team, []).append(r)
            for recs in self._by_team.values():
                recs.sort(key=lambda r: -r.length)
        if not self._by_team:
            return None
        team = self._team(request)
        hashes = request.block_hashes
        for rec in self._by_team.get(team, ()) if team is not None else ():
            k = len(rec.block_hashes or ())
            if rec.length < request.num_tokens and len(hashes) >= k and (
                    hashes[k - 1] == rec.block_hashes[-1]):  # type: ignore[index]
                return rec
        return None

    def observe(self, request: Any, hit_tokens: int) -> bool:
        """A request without a binding found ``hit_tokens`` in COLD prefix caching.
        Returns whether that made a head due for promotion."""
        if (hit_tokens < self.min_len or self.budget < hit_tokens
                or request.num_preemptions):  # re-admitted: it hits its own blocks
            return False
        team = self._team(request)
        if team is None:
            return False
        k = hit_tokens // self.chunk
        key = (team, request.block_hashes[k - 1])
        n = self.seen.pop(key, 0) + 1
        self.seen[key] = n
        if len(self.seen) > TRACKED:
            self.seen.popitem(last=False)
        if n >= self.min_hits and key not in self.pending:
            self.pending[key] = (team, tuple(request.prompt_token_ids[:k * self.chunk]),
                                 tuple(request.block_hashes[:k]))
            return True
        return False

    def run(self, kv: Any) -> int:
        """Promote what is pending and written; returns how many were promoted. ``kv``
        is the KV manager."""
        done = 0
        pending, self.pending = self.pending, {}
        for key, (team, tokens, hashes) in pending.items():
            if not kv.chunks.written(hashes):  # computed in this step: the next one
                self.pending[key] = (team, tokens, hashes)
                continue
            self.seen.pop(key, None)
            blocks = kv.chunks.lookup(hashes, 0, len(tokens))
            if len(blocks) != len(tokens):  # evicted meanwhile
                continue
            rec = self.registry.promote(team, tokens, self.budget)
            if rec is None or rec.hot is None:
                continue
            rec.block_hashes = hashes
            kv.block_pool.touch(blocks)  # held until the step that copies is scheduled
            self.retained.extend(blocks)
            start = rec.hot.start
            self.copies.extend(KVCacheBlockCopy(b.block_id, start + i)
                               for i, b in enumerate(blocks))
            done += 1
            logger.info("GraniKV: %s promoted to HOT (%d tokens; implicit HOT holds %d of "
                        "%d slots)", rec.prefix_id, len(tokens),
                        self.registry.implicit_slots(), self.budget)
        return done

    def take(self) -> tuple[list[KVCacheBlockCopy], list[KVCacheBlock]]:
        copies, retained = self.copies, self.retained
        self.copies, self.retained = [], []
        return copies, retained

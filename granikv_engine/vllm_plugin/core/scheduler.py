"""GraniKV schedulers: vLLM's (async) scheduler with a HOT arena and prefix binding.

On arrival a request is bound (``Intent``) to a prefix: as its *fill* when it registers
one, or as a *hit* when it names a READY prefix of its team (or, with prompt matching on,
when its prompt starts with one). Everything else about scheduling is stock vLLM.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import (
    PrefixError,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)
from granikv_engine.vllm_plugin.core.binding import Binding, decide
from granikv_engine.vllm_plugin.core.control import Control
from granikv_engine.vllm_plugin.core.engine_hooks import offer_scheduler
from granikv_engine.vllm_plugin.core.hasher import (
    Seed,
    SeededBlockHasher,
    SeedTable,
    plain_hashing,
)
from granikv_engine.vllm_plugin.core.implicit import Promoter
from granikv_engine.vllm_plugin.core.kv_manager import GraniKVCacheManager, Intent, reserve_arena
from granikv_engine.vllm_plugin.core.step_stats import StepStats
from granikv_engine.vllm_plugin.enable import granikv_config
from granikv_engine.vllm_plugin.request_args import GraniKVArgs

logger = init_logger(__name__)

_DONE = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


class GraniKVSchedulerMixin:
    """Mixed into ``Scheduler`` and ``AsyncScheduler`` (chosen by async_scheduling)."""

    kv_cache_manager: Any
    block_size: int
    vllm_config: Any

    def _granikv_setup(self) -> None:
        cfg = granikv_config(self.vllm_config)
        if cfg is None:
            raise ValueError("GraniKVScheduler needs additional_config.granikv.enabled")
        if self.block_size != 1:
            raise ValueError(f"GraniKV needs block_size=1, got {self.block_size}")
        pool = self.kv_cache_manager.block_pool
        arena = reserve_arena(pool, cfg.hot_capacity(pool.num_gpu_blocks))
        self.granikv_cfg = cfg
        budgets = TeamBudgets(cfg.team_hot_slots) if cfg.team_hot_slots else None
        self.registry = PrefixRegistry(HotPool(arena.start, arena.length), budgets=budgets)
        # KV-cache events and KV connectors read one hash a block: no chunks for them
        chunked = (not pool.enable_kv_cache_events
                   and getattr(self, "connector", None) is None)
        self.kv = GraniKVCacheManager.adopt(self.kv_cache_manager, self.registry, arena,
                                             cfg.fast_alloc,
                                             cfg.hash_chunk if chunked else 1)
        self.hash_chunk = self.kv.chunk  # tokens per request block hash
        if cfg.implicit_hot and self.kv.chunks is not None and cfg.prompt_match:
            self.kv.promoter = Promoter(self.registry, int(arena.length * cfg.implicit_fraction),
                                        self.kv.chunk, cfg.implicit_min_len,
                                        cfg.implicit_min_hits, cfg.default_team)
        elif cfg.implicit_hot:
            logger.warning("GraniKV: implicit_hot needs prefix caching, hash_chunk > 1 "
                           "and prompt_match; it is off")
        self.hasher: SeededBlockHasher | None = None
        self._seeds_version = -1  # registry version the hasher's seed table reflects
        self._filling: dict[str, PrefixRecord] = {}  # request id -> the record it fills
        self.granikv_events: dict[str, int] = {"registrations": 0, "fills_done": 0,
                                          "fills_aborted": 0, "bind_errors": 0,
                                          "bound_requests": 0, "prefix_reads_skipped": 0}
        self.control = Control(self)
        self.step_stats = StepStats()
        offer_scheduler(self)  # the engine core builds its block hasher next
        logger.info("GraniKV: HOT arena = blocks [%d, %d), COLD = %d blocks",
                    arena.start, arena.end, self.kv.cold_capacity)

    # ---- timing and peaks (for the overhead benchmark and the memory proof) ----------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        promoter = self.kv.promoter
        if promoter is not None and self.kv.chunks is not None:  # (implicit.py)
            self.kv.chunks.new_step()
            if promoter.pending:  # heads left pending by the last step
                promoter.run(self.kv)
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        if promoter is not None:
            self._publish_seeds()  # promotions of this step, if any (versioned)
        dt = time.perf_counter() - t
        used = self._cold_used()
        over = used - self._cold_tokens_running() if self.step_stats.track else 0
        self.step_stats.scheduled(dt, used, over)
        return out

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = super().update_from_output(*args, **kwargs)  # type: ignore[misc]
        self.step_stats.updated(time.perf_counter() - t)
        return out

    def _cold_used(self) -> int:
        return self.kv.cold_capacity - self.kv.block_pool.get_num_free_blocks()

    def _cold_tokens_running(self) -> int:
        """Tokens of running requests that need a COLD slot (computed or scheduled, past
        their HOT prefix). Equals COLD slots in use when no two requests share a COLD
        block: the token-granularity claim, checked every step."""
        held = self.kv.held
        total = 0
        for r in self.running:  # type: ignore[attr-defined]
            h = held.get(r.request_id)
            total += max(0, r.num_computed_tokens - (h.hot_len if h else 0))
        return total

    # ---- binding ------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        intent = self._bind(request)
        if intent is not None and not intent.fill and request.skip_reading_prefix_cache:
            # Prompt logprobs (or an explicit skip) need every prompt position computed:
            # stock vLLM skips its prefix cache for such a request, so it skips HOT too.
            self.granikv_events["prefix_reads_skipped"] += 1
            intent = None
        if intent is not None:
            self.kv.intents[request.request_id] = intent
            self.granikv_events["bound_requests"] += 1
        super().add_request(request)  # type: ignore[misc]

    def _bind(self, request: Request) -> Intent | None:
        sp = request.sampling_params
        prompt = request.prompt_token_ids
        if prompt is None:
            return None
        try:
            args = GraniKVArgs.from_extra_args(sp.extra_args if sp is not None else None)
            binding = decide(args, prompt, RegistryIndex(self.registry),
                             self.granikv_cfg.default_team, self.granikv_cfg.prompt_match)
            if binding is None:
                return None
            if binding.fill:
                assert args is not None
                return self._bind_fill(request, binding, args.pin, prompt)
            # Not READY yet (filling, or COLD): bound now, served from HOT if it is READY
            # when first scheduled, else by the stock path.
            assert binding.prefix_id is not None
            return Intent(binding.prefix_id, False, self.registry.get(binding.prefix_id, None))
        except (PrefixError, ValueError) as e:
            self.granikv_events["bind_errors"] += 1
            logger.warning("GraniKV: request %s served without HOT binding: %s",
                           request.request_id, e)
        return None

    def _bind_fill(self, request: Request, binding: Binding, pin: bool,
                   prompt: list[int]) -> Intent | None:
        rec = self.registry.register(binding.team, prompt, binding.prefix_id, pin=pin)
        self.granikv_events["registrations"] += 1
        self._publish_seeds()  # registering may have evicted or replaced others
        if rec.state is PrefixState.FILLING and all(r is not rec
                                                    for r in self._filling.values()):
            self._filling[request.request_id] = rec
            return Intent(rec.prefix_id, True, rec)
        if rec.state is PrefixState.READY:  # already there: an ordinary hit
            return Intent(rec.prefix_id, False, rec)
        return None  # did not fit the arena, or another request is filling it

    # ---- completion -----------------------------------------------------------------
    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        out = super()._free_request(request, delay_free_blocks)  # type: ignore[misc]
        rid = request.request_id
        rec = self._filling.pop(rid, None)
        if rec is not None:
            if request.status in _DONE and request.num_computed_tokens >= rec.length:
                n = rec.length // self.hash_chunk  # the prefix's whole chunks
                if plain_hashing(request) and len(request.block_hashes) >= n:
                    rec.block_hashes = tuple(request.block_hashes[:n])
                self.registry.mark_ready(rec)
                self.granikv_events["fills_done"] += 1
            else:
                self.registry.abort_fill(rec)
                self.granikv_events["fills_aborted"] += 1
            self._publish_seeds()
        self.kv.forget(rid)
        return out

    # ---- hashing --------------------------------------------------------------------
    def wrap_block_hasher(self, stock: Any) -> SeededBlockHasher:
        self.hasher = SeededBlockHasher(stock, self.granikv_cfg.default_team,
                                        self.granikv_cfg.prompt_match, self.hash_chunk)
        self._publish_seeds()
        return self.hasher

    def _publish_seeds(self) -> None:
        """Rebuild the hasher's seed table when the registry changed since the last
        build (it copies every READY prefix's tokens and hashes)."""
        if self.hasher is None or self._seeds_version == self.registry.version:
            return
        self._seeds_version = self.registry.version
        seeds = [Seed(r.prefix_id, r.team, list(r.tokens), list(r.block_hashes))
                 for r in self.registry.records()
                 if r.state is PrefixState.READY and r.block_hashes is not None]
        self.hasher.publish(SeedTable.build(seeds))  # type: ignore[arg-type]


class RegistryIndex:
    """``binding.PrefixIndex`` over the live registry: a named prefix binds in any state
    (filling, COLD); a matched one must be READY."""

    def __init__(self, registry: PrefixRegistry) -> None:
        self.registry = registry

    def named(self, prefix_id: str, team: str) -> tuple[int, ...]:
        return self.registry.get(prefix_id, team).tokens

    def longest(self, team: str, prompt: Sequence[int]) -> str | None:
        rec = self.registry.match(team, prompt)
        return rec.prefix_id if rec is not None else None


class GraniKVScheduler(GraniKVSchedulerMixin, Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._granikv_setup()


class GraniKVAsyncScheduler(GraniKVSchedulerMixin, AsyncScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._granikv_setup()

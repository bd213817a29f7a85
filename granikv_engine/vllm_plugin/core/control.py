"""Control operations on a running GraniKV engine (list, pin, unpin, unregister,
stats), served by the scheduler in the engine-core process.

They travel as vLLM *utility calls* (``EngineCore.granikv_control``), the same channel
``reset_prefix_cache`` uses, so they work in-process and across processes. Answers are
plain dicts of the shapes ``granikv_engine.stats`` declares (``PrefixRecordView``,
``EngineStats``); errors come back as ``{"error": {"status", "type", "message"}}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.prefix_registry import (
    PrefixError,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)
from granikv_engine.stats import (
    EngineStats,
    HitStats,
    HotStats,
    PrefixRecordView,
    TeamHotStats,
)
from granikv_engine.vllm_plugin.core.step_stats import StepStats


def record_dict(rec: PrefixRecord) -> PrefixRecordView:
    return {"prefix_id": rec.prefix_id, "team": rec.team, "length": rec.length,
            "state": rec.state.value, "pinned": rec.pinned, "hits": rec.hits,
            "implicit": rec.implicit,
            "content_hash": rec.content_hash,
            "hot_start": rec.hot.start if rec.hot else None}


def team_stats(registry: PrefixRegistry) -> dict[str, TeamHotStats]:
    budgets = registry.budgets
    used = registry.team_slots()
    teams = sorted({*used, *(budgets.teams if budgets else ())})
    return {t: {"used": used.get(t, 0), "budget": budgets.of(t) if budgets else None}
            for t in teams}


def error_dict(e: Exception) -> dict[str, Any]:
    status = getattr(e, "status", 400)
    return {"error": {"status": status, "type": type(e).__name__, "message": str(e)}}


class Control:
    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        fn = getattr(self, f"op_{op}", None)
        if fn is None:
            return error_dict(ValueError(f"unknown granikv op {op!r}"))
        try:
            out: dict[str, Any] = fn(**args)
        except (PrefixError, TypeError, ValueError) as e:
            return error_dict(e)
        self.scheduler._publish_seeds()
        return out

    def op_list(self, team: str | None = None) -> dict[str, Any]:
        return {"prefixes": [record_dict(r) for r in self.scheduler.registry.records(team)]}

    def op_get(self, prefix_id: str, team: str | None = None) -> PrefixRecordView:
        return record_dict(self.scheduler.registry.get(prefix_id, team))

    def op_pin(self, prefix_id: str, team: str | None = None) -> PrefixRecordView:
        return record_dict(self.scheduler.registry.pin(prefix_id, team))

    def op_unpin(self, prefix_id: str, team: str | None = None) -> PrefixRecordView:
        return record_dict(self.scheduler.registry.unpin(prefix_id, team))

    def op_unregister(self, prefix_id: str, team: str | None = None) -> dict[str, Any]:
        freed = self.scheduler.registry.unregister(prefix_id, team)
        return {"prefix_id": prefix_id, "freed_now": freed}

    def op_stats(self) -> EngineStats:
        s, kv = self.scheduler, self.scheduler.kv
        free = kv.block_pool.get_num_free_blocks()
        states = [r.state for r in s.registry.records()]
        return {
            "hot": cast(HotStats, s.registry.pool.stats()._asdict()),
            "cold": {"capacity": kv.cold_capacity, "free": free,
                     "used": kv.cold_capacity - free, "usage": kv.usage},
            "prefixes": {st.value: states.count(st) for st in PrefixState},
            "hits": cast(HitStats, dataclasses.asdict(kv.hot_counters)),
            "events": dict(s.granikv_events),
            "evictions": s.registry.evictions,
            "compactions": s.registry.compactions,
            "cold_registrations": s.registry.cold_registrations,
            "replacements": s.registry.replacements,
            "teams": team_stats(s.registry),
            "over_budget": s.registry.over_budget,
            "implicit": {"enabled": kv.promoter is not None,
                         "budget": kv.promoter.budget if kv.promoter else 0,
                         "used": s.registry.implicit_slots(),
                         "entries": sum(r.implicit for r in s.registry.records()),
                         "promotions": s.registry.implicit_promotions,
                         "evictions": s.registry.implicit_evictions,
                         "adoptions": s.registry.implicit_adoptions,
                         "hits": kv.hot_counters.implicit_hits},
            "seeded_hash_tokens": s.hasher.seeded_tokens if s.hasher else 0,
            "scheduler": s.step_stats.snapshot(),
        }

    def op_hot_budgets(self, teams: dict[str, int | None], default: int = 0,
                       floor: int = 0) -> dict[str, Any]:
        """Give every team a HOT budget (``TeamBudgets.share`` over this engine's arena);
        answers the budgets and the arena's size."""
        registry = self.scheduler.registry
        budgets = TeamBudgets.share(registry.pool.capacity, teams, default, floor)
        registry.budgets = budgets
        registry.version += 1
        return {"arena": registry.pool.capacity, "default": budgets.default,
                "teams": dict(budgets.teams)}

    def op_reset_peaks(self, track: bool = False) -> dict[str, Any]:
        """Restart the step counters; ``track`` also checks every step that COLD slots
        in use equal the running requests' COLD tokens (costs O(running) a step)."""
        self.scheduler.step_stats = StepStats(track)
        return {"ok": True}

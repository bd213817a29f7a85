"""Hooks on vLLM's engine core, installed by the plugin in every process.

- ``get_request_block_hasher`` (as looked up by ``vllm.v1.engine.core``) is wrapped: when
  the engine that is being built has a GraniKV scheduler, its hasher hashes per the
  scheduler's ``hash_chunk`` tokens and becomes the scheduler's seeded hasher
  (``hasher.py``). ``EngineCore.__init__`` builds the scheduler
  first and the hasher right after, and the plugin is loaded at the top of that same
  ``__init__``, so this is the one place that sees both in every process layout.
- ``EngineCore.granikv_control(op, args)``: the utility call behind ``control.py``.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from granikv_engine.vllm_plugin.core.control import error_dict


class _Handoff:
    """The GraniKV scheduler built by the engine core now being constructed."""

    ref: weakref.ReferenceType[Any] | None = None

    @classmethod
    def offer(cls, scheduler: Any) -> None:
        cls.ref = weakref.ref(scheduler)

    @classmethod
    def take(cls) -> Any:
        sched, cls.ref = (cls.ref() if cls.ref else None), None
        return sched


offer_scheduler = _Handoff.offer


def install() -> None:
    import vllm.v1.engine.core as core

    if getattr(core.EngineCore, "_granikv_hooked", False):
        return
    stock_factory = core.get_request_block_hasher

    @functools.wraps(stock_factory)
    def get_request_block_hasher(hash_block_size: int, caching_hash_fn: Any) -> Any:
        sched = _Handoff.take()
        if sched is None:
            return stock_factory(hash_block_size, caching_hash_fn)
        return sched.wrap_block_hasher(stock_factory(sched.hash_chunk, caching_hash_fn))

    core.get_request_block_hasher = get_request_block_hasher
    core.EngineCore.granikv_control = granikv_control  # type: ignore[attr-defined]
    core.EngineCore._granikv_hooked = True  # type: ignore[attr-defined]


def granikv_control(self: Any, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """``stats`` with ``workers: False`` leaves out the workers' dispatcher counters: a
    call to every worker wakes its message-queue reader, which then polls a core for a
    second (vLLM's ``busy_loop_s``), so a caller that asks every second keeps the
    workers of an idle engine busy."""
    control = getattr(self.scheduler, "control", None)
    if control is None:
        return error_dict(RuntimeError("GraniKV is not enabled on this engine "
                                       "(additional_config.granikv.enabled)"))
    args = dict(args or {})
    workers = bool(args.pop("workers", True))
    out = control.handle(op, args)
    if op == "stats" and workers and "error" not in out:
        ranks = self.model_executor.collective_rpc("granikv_dispatch_stats")
        out["dispatch"] = ranks[0] if ranks else {}
        out["dispatch_ranks_agree"] = all(r == ranks[0] for r in ranks)
    return out

"""Hooks on vLLM's ``EngineCore`` (engine-core process), installed by the plugin.

- after ``__init__``: a GraniKV scheduler wraps the engine's block hasher
  (``hasher.py``) - the engine builds the hasher after the scheduler, so the scheduler
  cannot do it itself;
- ``granikv_control(op, args)``: the utility call behind ``control.py``.
"""

from __future__ import annotations

import functools
from typing import Any

from granikv_engine.vllm_plugin.control import error_dict, worker_dispatch_stats


def install() -> None:
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore, "_granikv_hooked", False):
        return
    stock_init = EngineCore.__init__

    @functools.wraps(stock_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        stock_init(self, *args, **kwargs)
        wrap = getattr(self.scheduler, "wrap_block_hasher", None)
        if wrap is not None and self.request_block_hasher is not None:
            self.request_block_hasher = wrap(self.request_block_hasher)

    EngineCore.__init__ = __init__  # type: ignore[method-assign]
    EngineCore.granikv_control = granikv_control  # type: ignore[attr-defined]
    EngineCore._granikv_hooked = True  # type: ignore[attr-defined]


def granikv_control(self: Any, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    control = getattr(self.scheduler, "control", None)
    if control is None:
        return error_dict(RuntimeError("GraniKV is not enabled on this engine "
                                       "(additional_config.granikv.enabled)"))
    out = control.handle(op, dict(args or {}))
    if op == "stats" and "error" not in out:
        ranks = self.model_executor.collective_rpc(worker_dispatch_stats)
        out["dispatch"] = ranks[0] if ranks else {}
        out["dispatch_ranks_agree"] = all(r == ranks[0] for r in ranks)
    return out

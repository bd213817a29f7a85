"""Worker-side calls, reachable by name through ``collective_rpc`` (vLLM's
``worker_extension_cls``): no function pickling across processes.

GraniKV engines get this extension automatically; a stock engine that wants the same
calls (benchmarks, tests) passes
``worker_extension_cls="granikv_engine.vllm_plugin.worker.worker_ext.GraniKVWorkerExtension"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXTENSION = "granikv_engine.vllm_plugin.worker.worker_ext.GraniKVWorkerExtension"


class GraniKVWorkerExtension:
    def granikv_reinit_weights(self, seed: int = 0, spread: float = 0.15) -> int:
        from granikv_engine.vllm_plugin.worker.weights import reinit_weights

        return reinit_weights(self, seed, spread)

    def granikv_dispatch_stats(self) -> dict[str, Any]:
        return worker_dispatch_stats(self)

    def granikv_set_backend(self, backend: str) -> int:
        """Force the dispatcher to "cascade" or "paged", or back to "auto"; returns the
        number of GraniKV builders changed. Benchmarks use it to attribute the gain."""
        from granikv_engine.dispatcher import Backend

        builders = granikv_builders(self)
        for b in builders:
            b.dispatcher.force = None if backend == "auto" else Backend(backend)
        return len(builders)

    def granikv_slot_kv(self, start: int, length: int) -> list[list[float]]:
        """The K/V cache slots ``[start, start + length)`` of every layer, each slot
        summed to one number a layer (checks that a HOT range holds a prefix's K/V)."""
        runner: Any = getattr(self, "model_runner", None)
        return [kv.flatten(0, 1)[start:start + length].flatten(1).double().sum(1).tolist()
                for kv in runner.kv_caches]

    def granikv_backend_names(self) -> list[str]:
        runner: Any = getattr(self, "model_runner", None)
        return sorted({g.backend.get_name() for gs in getattr(runner, "attn_groups", [])
                       for g in gs})


def granikv_builders(worker: Any) -> list[Any]:
    """The GraniKV metadata builders of a worker's model runner."""
    from granikv_engine.vllm_plugin.worker.runner_binding import runner_builders

    return [b for _, b in runner_builders(getattr(worker, "model_runner", None))]


def worker_dispatch_stats(worker: Any) -> dict[str, Any]:
    """Runs on each worker (via collective_rpc): the dispatcher counters of its GraniKV
    metadata builders, summed."""
    total: dict[str, Any] = {}
    runner = getattr(worker, "model_runner", None)
    hooked = set(map(id, getattr(runner, "_granikv_graph_builders", None) or []))
    for b in granikv_builders(worker):
        _merge(total, b.counters.snapshot())
        _merge(total, {"host_block_table": int(b.host_block_table is not None),
                       "full_graph_hook": int(id(b) in hooked)})
    return total


def _merge(into: dict[str, Any], snap: Mapping[str, Any]) -> None:
    for k, v in snap.items():
        if isinstance(v, dict):
            d = into.setdefault(k, {})
            for kk, vv in v.items():
                d[kk] = d.get(kk, 0) + vv
        else:
            into[k] = into.get(k, 0) + v

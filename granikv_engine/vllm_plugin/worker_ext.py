"""Worker-side calls, reachable by name through ``collective_rpc`` (vLLM's
``worker_extension_cls``): no function pickling across processes.

GraniKV engines get this extension automatically; a stock engine that wants the same
calls (benchmarks, tests) passes
``worker_extension_cls="granikv_engine.vllm_plugin.worker_ext.GraniKVWorkerExtension"``.
"""

from __future__ import annotations

from typing import Any

EXTENSION = "granikv_engine.vllm_plugin.worker_ext.GraniKVWorkerExtension"


class GraniKVWorkerExtension:
    def granikv_reinit_weights(self, seed: int = 0, spread: float = 0.15) -> int:
        from granikv_engine.vllm_plugin.weights import reinit_weights

        return reinit_weights(self, seed, spread)

    def granikv_dispatch_stats(self) -> dict[str, Any]:
        from granikv_engine.vllm_plugin.control import worker_dispatch_stats

        return worker_dispatch_stats(self)

    def granikv_set_backend(self, backend: str) -> int:
        """Force the dispatcher to "cascade" or "paged", or back to "auto"; returns the
        number of GraniKV builders changed. Benchmarks use it to attribute the gain."""
        from granikv_engine.dispatcher import Backend
        from granikv_engine.vllm_plugin.control import granikv_builders

        builders = granikv_builders(self)
        for b in builders:
            b.dispatcher.force = None if backend == "auto" else Backend(backend)
        return len(builders)

    def granikv_backend_names(self) -> list[str]:
        runner: Any = getattr(self, "model_runner", None)
        return sorted({g.backend.get_name() for gs in getattr(runner, "attn_groups", [])
                       for g in gs})

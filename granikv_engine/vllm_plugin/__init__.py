"""GraniKV as a vLLM plugin (entry point ``vllm.general_plugins: granikv``).

``register()`` runs in every vLLM process (front end, engine core, workers) and changes
nothing until a config asks for GraniKV:

    LLM(model, additional_config={"granikv": {"enabled": True}})
    vllm serve MODEL --additional-config '{"granikv": {"enabled": true}}'

With it, the config gets block size 1 and the GraniKV scheduler (``enable.py``), decoder
attention layers get the GraniKV backend (``backend.py``, its per-step builder in
``metadata_builder.py``), and the engine core gets the seeded block hasher and the
``granikv_control`` utility (``engine_hooks.py``). The
backend is also registered as ``AttentionBackendEnum.CUSTOM``. Every vLLM internal that
GraniKV patches or reads is listed, and the process-wide hooks installed, in
``patches.py``; another vLLM version than the one they were written for is refused.
"""

from __future__ import annotations


def register() -> None:
    from granikv_engine.vllm_plugin import patches

    patches.apply()

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

    _log_like_vllm()
    patches.apply()


def _log_like_vllm() -> None:
    """GraniKV's log lines go where vLLM's go, at vLLM's level (``VLLM_LOGGING_LEVEL``):
    the engine's loggers are named after their modules, outside the ``vllm`` logger that
    vLLM configures, and would otherwise show warnings only."""
    import logging

    vllm_log, ours = logging.getLogger("vllm"), logging.getLogger("granikv_engine")
    if vllm_log.handlers and not ours.handlers:
        for h in vllm_log.handlers:
            ours.addHandler(h)
        ours.setLevel(vllm_log.level)
        ours.propagate = False

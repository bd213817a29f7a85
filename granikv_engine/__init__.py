"""GraniKV: an asymmetric HOT/COLD KV cache for multi-agent serving on vLLM.

The core (pools, registry, step plan, dispatcher, reference attention) is pure Python and
torch; vLLM is imported only under ``granikv_engine.vllm_plugin``.
"""

__version__ = "0.1.0"

"""The engine-core process's side of GraniKV: the scheduler (``scheduler.py``: which
prefix a request binds to, ``binding.py``), the KV-cache manager over HOT and COLD
(``kv_manager.py``, ``fast_alloc.py``), the seeded block hasher (``hasher.py``), the
control utility call (``control.py``, ``engine_hooks.py``) and its step counters."""

"""The worker processes' side of GraniKV: the attention backend (``backend.py``), its
per-step builder (``metadata_builder.py``: the dispatcher's choice per HOT group, the
kernel plan), how the builders reach the model runner's host block table
(``runner_binding.py``, ``host_table.py``), CUDA-graph modes per step (``cuda_graphs.py``),
the kernels (``attn_ops.py``: torch references on CPU, ``kernels/``: FA3 and CUDA on a
GPU; ``dispatch_table.py``: the measured crossover table), and the worker extension
(``worker_ext.py``, ``weights.py``)."""

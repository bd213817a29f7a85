"""vLLM finds GraniKV only through its entry point: the check says whether this Python
has it (and how to fix it when not), and a control call to an engine core that runs
without the plugin names the cause instead of vLLM's AttributeError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from granikv_engine.vllm_plugin import client, installed

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_project_has_the_entry_point() -> None:
    assert installed.entry_point() == installed.TARGET
    installed.check()
    assert installed.main() == 0


def test_an_importable_checkout_without_the_distribution_fails_with_the_fix() -> None:
    # -S: no site-packages, so no distribution metadata; the checkout itself imports
    r = subprocess.run([sys.executable, "-S", "-m", "granikv_engine.vllm_plugin.installed"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "no 'granikv' entry point in group 'vllm.general_plugins'" in r.stderr
    assert "pip install" in r.stderr and "PYTHONPATH" in r.stderr


class _PlainCore:
    """What vLLM's core client raises for a utility method the engine core lacks."""

    def call_utility(self, method: str, *args: Any) -> Any:
        raise Exception(f"Call to {method} method failed: 'EngineCoreProc' object has no "
                        f"attribute '{method}'")

    async def call_utility_async(self, method: str, *args: Any) -> Any:
        self.call_utility(method, *args)


class _Engine:
    def __init__(self) -> None:
        self.engine_core = _PlainCore()


def test_a_control_call_to_a_plain_engine_core_names_the_cause() -> None:
    with pytest.raises(installed.PluginNotLoaded, match=r"not loaded in vLLM.*pip install"):
        client.control(_Engine(), "list", team="")
    import asyncio

    with pytest.raises(installed.PluginNotLoaded, match="granikv_control"):
        asyncio.run(client.acontrol(_Engine(), "list", team=""))
    assert installed.not_loaded(ValueError("something else")) is None

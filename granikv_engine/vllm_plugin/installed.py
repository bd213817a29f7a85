"""Is GraniKV installed where vLLM looks for it?

vLLM loads plugins through the ``vllm.general_plugins`` entry point in every process it
starts: the engine core and the workers import nothing of ours unless the project's
distribution metadata (``granikv``, with its entry point) is on the path of the Python
that runs them. A project that is only importable (``PYTHONPATH=.``) passes every import
in the front end and still runs a plain vLLM engine core; the first control call then
fails inside vLLM with "'EngineCoreProc' object has no attribute 'granikv_control'".
``check()`` says so before an engine starts; ``PluginNotLoaded`` is what a control call
raises when it happens anyway.

    python -m granikv_engine.vllm_plugin.installed   # exit 1, with the fix, if not
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

GROUP = "vllm.general_plugins"
NAME = "granikv"
TARGET = "granikv_engine.vllm_plugin:register"
HOW = ("install the project into the Python that runs vLLM (`python -m pip install "
       "--no-deps -e .` in a checkout, or its wheel), so that vLLM's engine core and "
       "workers load it through the entry point "
       f"'{GROUP}: {NAME} = {TARGET}'; being importable (PYTHONPATH) is not enough")


class PluginNotLoaded(RuntimeError):
    """GraniKV was asked for, but vLLM's engine core runs without the plugin."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"GraniKV is not loaded in vLLM ({detail}): {HOW}")


def entry_point() -> str | None:
    """The target of GraniKV's vLLM entry point as this Python sees it, or None."""
    for ep in entry_points(group=GROUP):
        if ep.name == NAME:
            return ep.value
    return None


def check() -> None:
    found = entry_point()
    if found is None:
        raise PluginNotLoaded(f"no '{NAME}' entry point in group '{GROUP}' for "
                              f"{sys.executable}")
    if found != TARGET:
        raise PluginNotLoaded(f"the '{NAME}' entry point names {found}, not {TARGET}")


def not_loaded(error: BaseException) -> PluginNotLoaded | None:
    """The error a control call got from an engine core without the plugin, explained."""
    if "has no attribute 'granikv_control'" in str(error):
        return PluginNotLoaded("the engine core has no granikv_control")
    return None


def main() -> int:
    try:
        check()
    except PluginNotLoaded as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{GROUP}: {NAME} = {TARGET} ({sys.executable})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

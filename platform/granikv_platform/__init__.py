"""GraniKV on Ray Serve: LLM replicas with GraniKV engines that are the app's
OpenAI-compatible and team-scoped HTTP ingress, and a prefix registry that outlives the replicas.

    from granikv_platform import PlatformConfig, build_app
    serve.run(build_app(PlatformConfig(...)))

Ray and vLLM load on first use of ``build_app`` (the config is plain pydantic).
"""

from __future__ import annotations

from typing import Any

from granikv_platform.config import PlatformConfig, TeamConfig

__all__ = ["PlatformConfig", "TeamConfig", "build_app"]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        from granikv_platform.builder import build_app

        return build_app
    raise AttributeError(name)

"""build_app: a PlatformConfig (the ``args`` of a Serve config) -> a Serve Application.

``serve deploy deploy/serve_config.yaml`` imports ``granikv_platform.builder:build_app``
and calls it with each application's ``args``; ``serve.run(build_app(args))`` does the
same from Python. The application is two deployments: the LLM replicas (one GraniKV
engine each, see ``placement.py``) and the HTTP ingress in front of them.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.deployment import Application

from granikv_platform.config import PlatformConfig
from granikv_platform.ingress import Ingress
from granikv_platform.placement import replica_options
from granikv_platform.replica import LLMReplica


def build_app(args: dict[str, Any] | PlatformConfig) -> Application:
    cfg = args if isinstance(args, PlatformConfig) else PlatformConfig.model_validate(args)
    data = cfg.model_dump(mode="json")  # plain data travels to the replicas
    llm = serve.deployment(**replica_options(cfg))(LLMReplica).bind(data)
    ing = cfg.ingress
    ingress = serve.deployment(
        name=f"{cfg.name}-ingress", num_replicas=ing.num_replicas,
        max_ongoing_requests=ing.max_ongoing_requests,
        ray_actor_options={"num_cpus": ing.num_cpus})(serve.ingress()(Ingress))
    return ingress.bind(llm, data)

"""build_app: a PlatformConfig (the ``args`` of a Serve config) -> a Serve Application.

``serve deploy deploy/serve_config.yaml`` imports ``granikv_platform.builder:build_app``
and calls it with each application's ``args``; ``serve.run(build_app(args))`` does the
same from Python. The application is the LLM replicas (one GraniKV engine each, see
``placement.py``), which are also its HTTP ingress (``replica_http.py``), and the
``config.services`` (small deployments that the replicas' routes reach by name, e.g. the
agents' run executor; each gets an ``AppHandle`` to the LLM replicas).
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.deployment import Application

from granikv_platform.app import load_object
from granikv_platform.app_handle import AppHandle
from granikv_platform.config import PlatformConfig, ServiceConfig
from granikv_platform.placement import replica_options
from granikv_platform.replica import LLMReplica


def build_app(args: dict[str, Any] | PlatformConfig) -> Application:
    cfg = args if isinstance(args, PlatformConfig) else PlatformConfig.model_validate(args)
    data = cfg.model_dump(mode="json")  # plain data travels to the replicas
    options = replica_options(cfg)
    llm = AppHandle(options["name"])
    services = {s.name: _service(cfg, s, llm, data) for s in cfg.services}
    return serve.deployment(**options)(serve.ingress()(LLMReplica)).bind(data, services)


def _service(cfg: PlatformConfig, svc: ServiceConfig, llm: AppHandle,
             data: dict[str, Any]) -> Application:
    cls = load_object(svc.cls)
    check = getattr(cls, "validate_options", None)
    if check is not None:
        check(svc.options)  # a bad option fails here, before anything starts
    return serve.deployment(
        name=f"{cfg.name}-{svc.name}", num_replicas=svc.num_replicas,
        max_ongoing_requests=svc.max_ongoing_requests,
        graceful_shutdown_timeout_s=svc.graceful_shutdown_timeout_s,
        ray_actor_options={"num_cpus": svc.num_cpus})(cls).bind(llm, data, svc.options)

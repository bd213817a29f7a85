"""Where an LLM replica runs: Serve deployment options from a PlatformConfig.

- CPU: the replica actor reserves ``replicas.num_cpus`` (fractions let several engines
  share a small machine); vLLM runs its engine core and worker as child processes.
- GPU, TP 1: the replica actor takes one GPU; vLLM's worker sees it as a child process.
- GPU, TP > 1: a placement group of TP bundles ``{"GPU": 1}``, PACK (one node when it
  fits); the replica sits in bundle 0 without a GPU and vLLM's Ray executor
  (``distributed_executor_backend="ray"``) starts one worker per bundle. The replica
  process sees no GPU, so the vLLM config (which inspects the device) is built by a small
  task inside bundle 0, as Ray Serve LLM does.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.serve._private.constants import RAY_SERVE_ENABLE_HA_PROXY
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from granikv_platform.config import PlatformConfig
from granikv_platform.front import RETRY_AFTER_S
from granikv_platform.routing import ROUTER_CLASS
from granikv_platform.serve_options import merge_deployment_options

# Serve reads these when a replica's process starts. The app's code (the engine's output
# loop, the HTTP app, every stream's chunks) runs on the replica's own event loop, next
# to the HTTP server that serves it under direct ingress: one loop, no thread hop per
# chunk (Serve's default runs it on a second loop, in a thread of its own).
REPLICA_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}


def uses_placement_group(cfg: PlatformConfig) -> bool:
    return cfg.engine.accelerator == "gpu" and cfg.engine.tensor_parallel_size > 1


def replica_options(cfg: PlatformConfig, haproxy: bool = RAY_SERVE_ENABLE_HA_PROXY
                    ) -> dict[str, Any]:
    """``serve.deployment`` options of the LLM replica deployment (the app's ingress).
    Routed by ``routing.ReplicaRouter`` behind Serve's Python proxy; behind its HAProxy
    (``haproxy``: Ray's own flag, read where the app is built), HAProxy picks the replica
    and Serve refuses a router of the ingress's own. Unless ``replicas.deployment`` says
    otherwise, at most 4 x ``max_ongoing_requests`` requests wait for a replica, and one
    more is turned away with a 503 that says when to retry."""
    r = cfg.replicas
    env = dict(r.runtime_env)
    env["env_vars"] = {**REPLICA_ENV, **(env.get("env_vars") or {})}  # the config's win
    actor: dict[str, Any] = {"num_cpus": r.num_cpus, "runtime_env": env}
    opts: dict[str, Any] = {
        "name": f"{cfg.name}-llm", "num_replicas": r.num_replicas,
        "max_ongoing_requests": r.max_ongoing_requests,
        "health_check_period_s": r.health_check_period_s,
        "health_check_timeout_s": r.health_check_timeout_s,
        "graceful_shutdown_wait_loop_s": r.graceful_shutdown_wait_loop_s,
        "graceful_shutdown_timeout_s": r.graceful_shutdown_timeout_s,
        "ray_actor_options": actor,
        "max_queued_requests": 4 * r.max_ongoing_requests,
        "backpressure_config": {"status_code": 503, "retry_after_s": RETRY_AFTER_S},
    }
    if not haproxy:
        opts["request_router_config"] = {
            "request_router_class": ROUTER_CLASS,
            "request_router_kwargs": {"replica_wait_s": r.replica_wait_s,
                                      "retry_after_s": RETRY_AFTER_S}}
    if cfg.engine.accelerator == "gpu" and not uses_placement_group(cfg):
        actor["num_gpus"] = 1
    if uses_placement_group(cfg):
        tp = cfg.engine.tensor_parallel_size
        opts["placement_group_bundles"] = [{"CPU": r.num_cpus, "GPU": 1}] + [
            {"GPU": 1} for _ in range(tp - 1)]
        opts["placement_group_strategy"] = "PACK"
    return merge_deployment_options(opts, r.deployment)


async def gpu_vllm_config(cfg: PlatformConfig, engine_args: dict[str, Any]) -> Any:
    """The vLLM config for a TP > 1 replica (built in bundle 0, where a GPU is visible),
    with the replica's placement group attached for vLLM's Ray executor; None when the
    replica can build it itself."""
    if not uses_placement_group(cfg):
        return None
    pg = ray.util.get_current_placement_group()
    if pg is None:
        raise RuntimeError("a TP > 1 replica must run in its placement group")
    task = ray.remote(_make_config).options(
        num_cpus=0, num_gpus=0.001,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=0))
    vllm_config = await task.remote(engine_args)
    vllm_config.parallel_config.placement_group = pg
    return vllm_config


def _make_config(engine_args: dict[str, Any]) -> Any:
    from granikv_platform.engine import make_vllm_config

    return make_vllm_config(engine_args)

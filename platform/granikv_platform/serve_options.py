"""Ray Serve deployment options passed through a config (``replicas.deployment``),
validated by Ray's own ``ray.serve.schema.DeploymentSchema``.

Any option of a deployment in a Serve config file may be given (autoscaling_config,
max_queued_requests, max_replicas_per_node, logging_config, ...) except those the
platform sets from its own fields: the name, the actor's resources and placement, and the
options that have a field of their own (so that each has one place).
"""

from __future__ import annotations

from typing import Any

_PLATFORM_SET = {
    "name": "the app's name",
    "ray_actor_options": "num_cpus, runtime_env and engine.accelerator",
    "placement_group_bundles": "engine.tensor_parallel_size",
    "placement_group_strategy": "engine.tensor_parallel_size",
    "user_config": "nothing (the config is the application's args)",
    "request_router_config": "replicas.replica_wait_s (the platform's router)",
}


def check_deployment_options(options: dict[str, Any], own_fields: set[str],
                             section: str) -> dict[str, Any]:
    """``options`` checked against Ray's schema; ValueError names the first problem.
    ``own_fields``: options the section sets through fields of its own."""
    for key in sorted(options):
        if key in _PLATFORM_SET:
            raise ValueError(f"{section}.deployment.{key} is set from {_PLATFORM_SET[key]}")
        if key in own_fields:
            raise ValueError(f"{section}.deployment.{key}: set {section}.{key}")
    if not options:
        return options
    from pydantic import ValidationError
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import DeploymentSchema  # lazy: Ray only when options are given

    unknown = sorted(set(options) - set(DeploymentSchema.model_fields))
    if unknown:
        raise ValueError(f"{section}.deployment: {unknown} are not Serve deployment options "
                         "(ray.serve.schema.DeploymentSchema)")
    try:
        DeploymentSchema.model_validate({"name": section, **options})
        if isinstance(options.get("autoscaling_config"), dict):  # a dict in the schema
            AutoscalingConfig.model_validate(options["autoscaling_config"])
    except ValidationError as e:
        raise ValueError(f"{section}.deployment: {e}") from e
    return options


def merge_deployment_options(opts: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``serve.deployment`` options ``opts`` with the passthrough ``extra`` over them;
    with an autoscaling_config, Serve chooses the number of replicas."""
    out = {**opts, **extra}
    if extra.get("autoscaling_config") is not None:
        out.pop("num_replicas", None)
    return out

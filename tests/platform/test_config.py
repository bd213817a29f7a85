"""PlatformConfig validation, placement options, and the deploy files (each file's
applications are validated and built into Serve Application objects; nothing starts)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from granikv_platform.app_handle import AppHandle
from granikv_platform.builder import build_app
from granikv_platform.config import PlatformConfig
from granikv_platform.loader import load_serve_config
from granikv_platform.placement import replica_options

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BASE: dict[str, Any] = {"model": {"model_id": "tiny", "source": "deploy/models/tiny-llama"},
                        "engine": {"accelerator": "cpu"}}


def cfg(**over: Any) -> PlatformConfig:
    data = copy.deepcopy(BASE)
    for key, val in over.items():
        data[key] = {**data.get(key, {}), **val} if isinstance(val, dict) else val
    return PlatformConfig.model_validate(data)


@pytest.mark.parametrize(("over", "message"), [
    ({"engine": {"tensor_parallel_size": 2}}, "tensor_parallel_size > 1 needs accelerator: gpu"),
    ({"engine": {"engine_kwargs": {"max_modle_len": 10}}}, "unknown vLLM engine arguments"),
    ({"engine": {"engine_kwargs": {"model": "x"}}}, "engine_kwargs.model is set from model.source"),
    ({"engine": {"engine_kwargs": {"additional_config": {"granikv": {}}}}}, "engine.granikv"),
    ({"engine": {"granikv": {"enabled": False}}}, "granikv.enabled must be true"),
    ({"engine": {"granikv": {"enabled": True, "hot_slot": 3}}}, "unknown granikv settings"),
    ({"teams": [{"name": "Red Team"}]}, "must match"),
    ({"teams": [{"name": "red"}, {"name": "red"}]}, "duplicate teams"),
    ({"teams": [{"name": "red", "context": "a", "context_file": "b"}]}, "not both"),
    ({"teams": [{"name": "red", "context_file": "no/such/file.md"}]}, "no file"),
    ({"model": {"source": "./no/such/model"}}, "does not exist"),
    ({"extra_routers": ["pkg.module.factory"]}, "module:function"),
    ({"services": [{"name": "agents", "cls": "pkg.Class"}]}, "module:Class"),
    ({"services": [{"name": "Agents!", "cls": "m:C"}]}, "service name"),
    ({"services": [{"name": "a", "cls": "m:C"}, {"name": "a", "cls": "m:D"}]},
     "duplicate services"),
    ({"replicas": {"num_replicas": 0}}, "greater than or equal to 1"),
    ({"replicas": {"surprise": 1}}, "Extra inputs are not permitted"),
])
def test_invalid_configs_say_why(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        cfg(**over)


def test_engine_args_and_paths() -> None:
    c = cfg(engine={"engine_kwargs": {"max_model_len": 512}, "granikv": {"enabled": True,
                                                                          "hot_slots": 64}},
            teams=[{"name": "blue", "context_file": "deploy/contexts/blue.md"}])
    args = c.engine_args()
    assert Path(args["model"]).is_absolute() and (Path(args["model"]) / "config.json").exists()
    assert args["served_model_name"] == ["tiny"] and args["max_model_len"] == 512
    assert args["additional_config"] == {"granikv": {"enabled": True, "hot_slots": 64}}
    assert "distributed_executor_backend" not in args  # CPU: vLLM's multiprocessing
    assert c.teams[0].context and c.teams[0].context.startswith("You are a planner")
    assert c.registry_name == "granikv-registry"


def test_placement_per_accelerator() -> None:
    cpu = replica_options(cfg(replicas={"num_cpus": 0.5, "num_replicas": 2}))
    actor = cpu["ray_actor_options"]
    assert actor["num_cpus"] == 0.5 and "num_gpus" not in actor and cpu["num_replicas"] == 2
    assert set(actor) == {"num_cpus", "runtime_env"}  # the replica's env (placement.py)
    assert "placement_group_bundles" not in cpu
    gpu1 = cfg(engine={"accelerator": "gpu"})
    assert replica_options(gpu1)["ray_actor_options"]["num_gpus"] == 1
    gpu4 = cfg(engine={"accelerator": "gpu", "tensor_parallel_size": 4},
               replicas={"num_cpus": 4})
    opts = replica_options(gpu4)
    assert opts["placement_group_bundles"] == [{"CPU": 4, "GPU": 1}] + [{"GPU": 1}] * 3
    assert opts["placement_group_strategy"] == "PACK"
    assert "num_gpus" not in opts["ray_actor_options"]  # the workers own the GPUs
    assert gpu4.engine_args()["distributed_executor_backend"] == "ray"


@pytest.mark.parametrize("name", ["local.yaml", "serve_config.yaml", "kuberay/rayservice.yaml"])
def test_deploy_files_build(name: str) -> None:
    from ray.serve.schema import ServeDeploySchema

    doc = yaml.safe_load((DEPLOY / name).read_text())
    if doc.get("kind") == "RayService":
        doc = yaml.safe_load(doc["spec"]["serveConfigV2"])
    ServeDeploySchema.model_validate(doc)  # what `serve deploy` / KubeRay accept
    serve_file = load_serve_config(DEPLOY / name)
    assert serve_file.apps
    for spec in serve_file.apps:
        app = build_app(spec.config)
        assert type(app).__name__ == "Application"


def test_services_are_deployments_next_to_the_replicas() -> None:
    agents = {"name": "agents", "cls": "granikv_agents.service:RunService",
              "options": {"auto_resume": False}}
    app = build_app(cfg(services=[agents]))
    assert app._bound_deployment.name == "granikv-llm"  # the LLM replicas: the ingress
    args = app._bound_deployment.init_args  # (config, services) of the LLM replicas
    (svc,) = args[1].values()
    assert svc._bound_deployment.name == "granikv-agents"
    assert svc._bound_deployment.num_replicas == 1
    llm = svc._bound_deployment.init_args[0]  # the service's handle to the LLM replicas
    assert isinstance(llm, AppHandle) and llm.deployment == "granikv-llm"
    assert pickle.loads(pickle.dumps(llm)).deployment == "granikv-llm"
    with pytest.raises(ValidationError, match="surprise"):  # the class checks its options
        build_app(cfg(services=[{**agents, "options": {"surprise": 1}}]))
    with pytest.raises(ValueError, match="cannot load object 'no_such_module:X'"):
        build_app(cfg(services=[{"name": "x", "cls": "no_such_module:X"}]))


def test_deploy_files_say_what_they_promise() -> None:
    local = load_serve_config(DEPLOY / "local.yaml")
    (app,) = local.apps
    assert app.config.engine.accelerator == "cpu" and app.config.engine.dummy_weights
    assert app.config.team_routers == ["granikv_agents.rest:runs_router"]
    assert [s.name for s in app.config.services] == ["agents"]
    assert local.http_options["host"] == "127.0.0.1"
    gpu = {a.name: a.config for a in load_serve_config(DEPLOY / "serve_config.yaml").apps}
    assert gpu["llama-8b"].model.source == "meta-llama/Llama-3.1-8B-Instruct"
    assert gpu["llama-8b"].engine.tensor_parallel_size == 1
    assert gpu["qwen-32b"].model.model_id == "Qwen/Qwen2.5-32B-Instruct"
    assert gpu["qwen-32b"].engine.tensor_parallel_size == 4
    manifest = yaml.safe_load((DEPLOY / "kuberay" / "rayservice.yaml").read_text())
    assert manifest["kind"] == "RayService" and manifest["apiVersion"] == "ray.io/v1"
    workers = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert all("nvidia.com/gpu" in w["template"]["spec"]["containers"][0]["resources"]["limits"]
               for w in workers)


def test_a_serve_file_with_a_bad_app_names_it(tmp_path: Path) -> None:
    doc = yaml.safe_load((DEPLOY / "local.yaml").read_text())
    doc["applications"][0]["args"]["engine"]["tensor_parallel_size"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError,
                       match=r"(?s)applications\[0\] \(granikv\).*needs accelerator: gpu"):
        load_serve_config(bad)

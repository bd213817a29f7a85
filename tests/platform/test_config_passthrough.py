"""The options a config passes through to vLLM's front end (``frontend``, checked by
vLLM's FrontendArgs) and to Ray Serve's LLM deployment (``replicas.deployment``, checked
by Ray's DeploymentSchema). Nothing starts."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.openai.cli_args import BaseFrontendArgs

from granikv_platform.builder import build_app
from granikv_platform.config import PlatformConfig
from granikv_platform.env import REPO_ROOT
from granikv_platform.frontend import frontend_namespace
from granikv_platform.loader import load_serve_config
from granikv_platform.placement import replica_options

BASE: dict[str, Any] = {"model": {"model_id": "tiny", "source": "deploy/models/tiny-llama"},
                        "engine": {"accelerator": "cpu"}}


def cfg(**over: Any) -> PlatformConfig:
    data = copy.deepcopy(BASE)
    data.update(over)
    return PlatformConfig.model_validate(data)


@pytest.mark.parametrize(("frontend", "message"), [
    ({"enable_auto_tool_choise": True}, "unknown vLLM front-end option"),
    ({"port": 9000}, "http_options.port"),
    ({"ssl_keyfile": "k.pem"}, "vllm serve's own HTTP server"),
    ({"api_key": ["x"]}, "auth"),
    ({"enable_auto_tool_choice": "sometimes"}, "valid boolean"),
    ({"enable_auto_tool_choice": True}, "needs frontend.tool_call_parser"),
    ({"enable_auto_tool_choice": True, "tool_call_parser": "hermes2"}, "not one of vLLM's"),
    ({"chat_template": "no/such/template.jinja"}, "no file"),
])
def test_bad_frontend_options_say_why(frontend: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        cfg(frontend=frontend)


def test_every_frontend_field_of_vllm_is_accepted() -> None:
    """The accepted names are vLLM's: each BaseFrontendArgs field, at its default."""
    defaults = {f.name: getattr(BaseFrontendArgs(), f.name)
                for f in dataclasses.fields(BaseFrontendArgs)}
    assert {"enable_auto_tool_choice", "tool_call_parser", "chat_template", "response_role",
            "enable_prompt_tokens_details"} <= set(defaults)
    assert cfg(frontend=defaults).frontend.keys() == defaults.keys()


def test_frontend_options_reach_vllms_serving_arguments(tmp_path: Any) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    c = cfg(frontend={"enable_auto_tool_choice": True, "tool_call_parser": "llama3_json",
                      "response_role": "bot", "chat_template": str(template),
                      "enable_prompt_tokens_details": True})
    ns = frontend_namespace(c.frontend, AsyncEngineArgs(**c.engine_args()))
    assert ns.enable_auto_tool_choice and ns.tool_call_parser == "llama3_json"
    assert ns.response_role == "bot" and ns.enable_prompt_tokens_details
    assert ns.chat_template == str(template) and ns.served_model_name == ["tiny"]
    assert ns.port == 8000  # vLLM's default for what the platform does not use
    rel = cfg(frontend={"chat_template": str(template.relative_to(tmp_path.parent.parent))}
              ) if template.is_relative_to(REPO_ROOT) else None
    assert rel is None or rel.frontend["chat_template"] == str(template)
    inline = "{{ messages[0]['content'] }}"
    assert cfg(frontend={"chat_template": inline}).frontend["chat_template"] == inline


@pytest.mark.parametrize(("section", "options", "message"), [
    ("replicas", {"max_queued_requests": "many"}, "valid integer"),
    ("replicas", {"autoscaling_config": {"min_replicas": 3, "max_replicas": 1}},
     "max_replicas"),
    ("replicas", {"num_replica": 2}, "not Serve deployment options"),
    ("replicas", {"ray_actor_options": {"num_gpus": 2}}, "engine.accelerator"),
    ("replicas", {"name": "x"}, "the app's name"),
    ("replicas", {"num_replicas": 2}, "set replicas.num_replicas"),
    ("replicas", {"request_router_config": {}}, "replicas.replica_wait_s"),
])
def test_bad_deployment_options_say_why(section: str, options: dict[str, Any],
                                        message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        cfg(**{section: {"deployment": options}})


def test_deployment_options_reach_serve() -> None:
    auto = {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 8}
    c = cfg(replicas={"max_ongoing_requests": 4, "deployment": {
        "autoscaling_config": auto, "max_queued_requests": 16, "max_replicas_per_node": 1}})
    opts = replica_options(c)
    assert opts["autoscaling_config"] == auto and "num_replicas" not in opts
    assert opts["max_queued_requests"] == 16 and opts["max_ongoing_requests"] == 4
    llm = build_app(c)._bound_deployment  # the LLM replicas are the app's ingress
    assert llm._deployment_config.max_queued_requests == 16
    assert llm._deployment_config.autoscaling_config.max_replicas == 3
    assert llm._replica_config.max_replicas_per_node == 1
    again = PlatformConfig.model_validate(c.model_dump(mode="json"))  # as replicas get it
    assert replica_options(again) == opts


def test_the_replicas_are_routed_with_a_bounded_wait_and_a_bounded_queue() -> None:
    c = cfg(replicas={"max_ongoing_requests": 8, "replica_wait_s": 4.0})
    opts = replica_options(c, haproxy=False)
    router = opts["request_router_config"]
    assert router["request_router_class"] == "granikv_platform.routing:ReplicaRouter"
    assert router["request_router_kwargs"]["replica_wait_s"] == 4.0
    assert opts["max_queued_requests"] == 32
    assert opts["backpressure_config"] == {"status_code": 503, "retry_after_s": 1}
    # Behind HAProxy, HAProxy picks the replica: Serve refuses a router of the ingress's
    assert "request_router_config" not in replica_options(c, haproxy=True)
    llm = build_app(c)._bound_deployment
    assert llm._deployment_config.backpressure_config.retry_after_s == 1


def test_the_apps_code_runs_on_the_replicas_own_loop_unless_the_config_says() -> None:
    env = replica_options(cfg())["ray_actor_options"]["runtime_env"]["env_vars"]
    assert env == {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}
    mine = {"env_vars": {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "1", "X": "y"},
            "pip": ["six"]}
    opts = replica_options(cfg(replicas={"runtime_env": mine}))["ray_actor_options"]
    assert opts["runtime_env"] == mine


def test_a_config_with_the_former_ingress_section_says_where_it_went() -> None:
    with pytest.raises(ValidationError, match=r"replicas\.deployment"):
        cfg(ingress={"num_replicas": 2})


def test_granikv_run_deploys_the_serve_file_as_serve_run_reads_it(tmp_path: Path) -> None:
    """deployments: overrides, runtime_env and logging_config reach the deployed config
    (local.start deploys ``deploy_doc`` with Serve's deploy_apps); edited args too."""
    from ray.serve.schema import ServeDeploySchema

    from granikv_platform.local import with_keys_file

    doc = yaml.safe_load((REPO_ROOT / "deploy" / "local.yaml").read_text())
    app = doc["applications"][0]
    app["deployments"] = [{"name": "granikv-llm", "max_queued_requests": 8}]
    app["runtime_env"] = {"env_vars": {"GRANIKV_PROBE": "1"}}
    app["logging_config"] = {"log_level": "WARNING"}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(doc))
    served = with_keys_file(load_serve_config(path), tmp_path / "keys")
    out = ServeDeploySchema.model_validate(served.deploy_doc("127.0.0.1", 8123))
    assert out.http_options.port == 8123
    (deployed,) = out.applications
    assert deployed.deployments[0].max_queued_requests == 8
    assert deployed.runtime_env == {"env_vars": {"GRANIKV_PROBE": "1"}}
    assert deployed.logging_config.log_level == "WARNING"
    assert deployed.args["auth"]["keys_file"] == str(tmp_path / "keys")
    app["deployments"] = [{"name": "granikv-llm2", "num_replicas": 2}]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"granikv-llm2.* is none of its deployments"):
        load_serve_config(path)

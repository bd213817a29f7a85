"""The options a config passes through to vLLM's front end (``frontend``, checked by
vLLM's FrontendArgs) and to Ray Serve's deployments (``replicas.deployment``,
``ingress.deployment``, checked by Ray's DeploymentSchema). Nothing starts."""

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
    ("ingress", {"max_ongoing_requests": 2}, "set ingress.max_ongoing_requests"),
])
def test_bad_deployment_options_say_why(section: str, options: dict[str, Any],
                                        message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        cfg(**{section: {"deployment": options}})


def test_deployment_options_reach_serve() -> None:
    auto = {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 8}
    c = cfg(replicas={"max_ongoing_requests": 4, "deployment": {
        "autoscaling_config": auto, "max_queued_requests": 16, "max_replicas_per_node": 1}},
        ingress={"deployment": {"max_queued_requests": 100}})
    opts = replica_options(c)
    assert opts["autoscaling_config"] == auto and "num_replicas" not in opts
    assert opts["max_queued_requests"] == 16 and opts["max_ongoing_requests"] == 4
    app = build_app(c)
    ingress = app._bound_deployment
    llm = ingress.init_args[0]._bound_deployment
    assert llm._deployment_config.max_queued_requests == 16
    assert llm._deployment_config.autoscaling_config.max_replicas == 3
    assert llm._replica_config.max_replicas_per_node == 1
    assert ingress._deployment_config.max_queued_requests == 100
    again = PlatformConfig.model_validate(c.model_dump(mode="json"))  # as replicas get it
    assert replica_options(again) == opts


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

"""vLLM's front-end options (the HTTP-layer arguments of ``vllm serve``) in a config.

The allowed names are read from vLLM's own ``FrontendArgs`` dataclass, not copied: the
fields of ``BaseFrontendArgs`` (chat template, tool calling, response role, prompt-token
details, LoRA modules, ...) configure the serving objects each replica builds. The
fields ``FrontendArgs`` adds on top are vLLM's own HTTP server's (host, port, TLS, CORS,
uvicorn, api_key, middleware); Ray Serve's proxy and the ingress serve HTTP here, so
those are refused with the option that does the job instead.
"""

from __future__ import annotations

import argparse
import dataclasses
from functools import cache
from typing import Any

from granikv_platform.env import resolve_path

# FrontendArgs fields that have a platform equivalent (the rest are refused generically).
_SERVER_EQUIVALENT = {
    "host": "http_options.host of the Serve config",
    "port": "http_options.port of the Serve config",
    "api_key": "auth (API keys per team)",
    "root_path": "the application's route_prefix",
}


@cache
def frontend_field_names() -> tuple[frozenset[str], frozenset[str]]:
    """(accepted, server-only): BaseFrontendArgs fields, and those FrontendArgs adds."""
    from vllm.entrypoints.openai.cli_args import BaseFrontendArgs, FrontendArgs

    base = frozenset(f.name for f in dataclasses.fields(BaseFrontendArgs))
    full = frozenset(f.name for f in dataclasses.fields(FrontendArgs))
    return base, full - base


def check_frontend(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` validated by vLLM (types, values, the tool parser's name), with a
    ``chat_template`` that names a local file made absolute; ValueError says why."""
    from pydantic import ValidationError
    from vllm.entrypoints.openai.cli_args import BaseFrontendArgs

    accepted, server_only = frontend_field_names()
    for key in sorted(set(options) - accepted):
        if key in server_only:
            instead = _SERVER_EQUIVALENT.get(key, "Ray Serve's proxy (http_options)")
            raise ValueError(f"frontend.{key} configures vllm serve's own HTTP server; "
                             f"here HTTP is served by the platform: use {instead}")
        raise ValueError(f"unknown vLLM front-end option frontend.{key} "
                         f"(vllm.entrypoints.openai.cli_args.BaseFrontendArgs)")
    try:
        BaseFrontendArgs(**options)
    except ValidationError as e:
        raise ValueError(f"frontend: {e}") from e
    _check_tool_parser(options)
    out = dict(options)
    template = out.get("chat_template")
    if isinstance(template, str) and "{" not in template:  # a path, not inline Jinja
        path = resolve_path(template)
        if path is None:
            raise ValueError(f"frontend.chat_template: no file {template!r}")
        out["chat_template"] = str(path)  # absolute: replicas do not share the cwd
    return out


def _check_tool_parser(options: dict[str, Any]) -> None:
    from vllm.tool_parsers import ToolParserManager

    parser = options.get("tool_call_parser")
    if options.get("enable_auto_tool_choice") and not parser:
        raise ValueError("frontend.enable_auto_tool_choice needs frontend.tool_call_parser")
    if parser and not options.get("tool_parser_plugin"):  # a plugin registers its own
        known = ToolParserManager.list_registered()
        if parser not in known:
            raise ValueError(f"frontend.tool_call_parser {parser!r} is not one of vLLM's "
                             f"{sorted(known)} (or set frontend.tool_parser_plugin)")


# The platform's defaults over vLLM's: usage.prompt_tokens_details.cached_tokens shows a
# client how much of its prompt was served from cache (a team's HOT context included).
PLATFORM_DEFAULTS: dict[str, Any] = {"enable_prompt_tokens_details": True}


def frontend_namespace(options: dict[str, Any], engine_args: Any) -> Any:
    """The ``argparse.Namespace`` vLLM's ``init_app_state`` reads: FrontendArgs (the
    configured options over the platform's defaults over vLLM's) and the engine's
    arguments."""
    from vllm.entrypoints.openai.cli_args import FrontendArgs

    args = FrontendArgs(**(PLATFORM_DEFAULTS | options))
    return argparse.Namespace(**(vars(args) | vars(engine_args)))

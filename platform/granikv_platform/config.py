"""PlatformConfig: the pydantic config of one GraniKV Serve application.

It is the ``args`` block of a Serve config file (``deploy/*.yaml``); ``build_app(args)``
validates it here. YAML is read only at the edges (``loader.py``, the CLI).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from granikv_engine.config import GraniKVConfig
from granikv_platform.env import resolve_path
from granikv_platform.frontend import check_frontend
from granikv_platform.names import TEAM_RE
from granikv_platform.serve_options import check_deployment_options

# Engine arguments the platform sets itself, from the fields named here.
_OWNED_KWARGS = {
    "model": "model.source", "served_model_name": "model.model_id",
    "tokenizer": "model.tokenizer", "tensor_parallel_size": "engine.tensor_parallel_size",
    "distributed_executor_backend": "engine.accelerator (the platform chooses it)",
    "worker_extension_cls": "nothing (GraniKV installs its own worker extension)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    model_id: str = Field(description="Name clients use in the `model` field of requests.")
    source: str = Field(description="A local model folder (config.json, weights or "
                        "load_format=dummy, tokenizer) or a Hugging Face id a cluster "
                        "node can download.")
    tokenizer: str | None = Field(None, description="Tokenizer folder or id; default: "
                                  "the model source.")

    @field_validator("source", "tokenizer")
    @classmethod
    def _local_or_hub_id(cls, v: str | None) -> str | None:
        if v is None:
            return v
        local = resolve_path(v)
        if local is not None:
            if not (local / "config.json").exists() and not (local / "tokenizer.json").exists():
                raise ValueError(f"{v!r} is a folder without config.json or tokenizer.json")
            return str(local)  # absolute: replicas do not share the driver's cwd
        if v.startswith(("/", ".", "~")) or v.count("/") != 1:
            raise ValueError(f"model path {v!r} does not exist (and is not a hub id org/name)")
        return v


class EngineConfig(_Strict):
    accelerator: Literal["cpu", "gpu"] = Field(
        "gpu", description="cpu: vLLM's CPU build, TP 1, multiprocessing executor; gpu: "
        "one GPU per TP rank, in a placement group, vLLM's Ray executor when TP > 1.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per replica (TP degree).")
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="vllm AsyncEngineArgs fields (max_model_len, "
        "dtype, load_format, gpu_memory_utilization, ...).")
    granikv: dict[str, Any] = Field(
        default_factory=lambda: {"enabled": True},
        description="GraniKV settings (granikv_engine.config.GraniKVConfig fields); sent "
        "as additional_config.granikv.")
    reinit_dummy_weights: bool = Field(
        True, description="With load_format=dummy, redraw the weights (seeded) so the "
        "model's outputs depend on its input; vLLM's dummy weights repeat two tokens.")
    weight_seed: int = Field(0, description="Seed of the redrawn dummy weights.")

    @field_validator("granikv")
    @classmethod
    def _granikv(cls, v: dict[str, Any]) -> dict[str, Any]:
        cfg = GraniKVConfig.from_dict(v)  # raises on unknown or invalid settings
        if not cfg.enabled:
            raise ValueError("the platform serves GraniKV engines: granikv.enabled must be true")
        return v

    @field_validator("engine_kwargs")
    @classmethod
    def _engine_kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if key in _OWNED_KWARGS:
                raise ValueError(f"engine_kwargs.{key} is set from {_OWNED_KWARGS[key]}")
        unknown = sorted(set(v) - engine_arg_names())
        if unknown:
            raise ValueError(f"unknown vLLM engine arguments {unknown}")
        extra = v.get("additional_config") or {}
        if "granikv" in extra:
            raise ValueError("set GraniKV options in engine.granikv, not additional_config")
        return v

    @model_validator(mode="after")
    def _tp_on_cpu(self) -> EngineConfig:
        if self.accelerator == "cpu" and self.tensor_parallel_size != 1:
            raise ValueError("tensor_parallel_size > 1 needs accelerator: gpu")
        return self

    @property
    def dummy_weights(self) -> bool:
        return self.engine_kwargs.get("load_format") == "dummy"


class TeamConfig(_Strict):
    name: str = Field(description="Team id: lowercase letters, digits, '-' and '_'.")
    context: str | None = Field(None, description="The team's shared context (system "
                                "message), pinned as its HOT prefix at start-up.")
    context_file: str | None = Field(None, description="Read the context from this file.")
    description: str = Field("", description="Free text shown by GET /teams.")
    hot_slots: int | None = Field(None, ge=1, description="HOT slots (tokens) this team's "
                                  "pinned prefixes, context and implicit prefixes may hold "
                                  "together on each replica; a pin past it is a 409. "
                                  "Default: granikv.team_hot_slots, else an equal share "
                                  "of the arena among the configured teams (at least one "
                                  "prefix of the largest size).")
    max_sequences: int | None = Field(None, ge=1, description="This team's "
                                      "limits.team_max_sequences (default: the limit's).")
    max_queued: int | None = Field(None, ge=0, description="This team's "
                                   "limits.team_max_queued (default: the limit's).")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TEAM_RE.match(v):
            raise ValueError(f"team name {v!r} must match {TEAM_RE.pattern}")
        return v

    @model_validator(mode="after")
    def _load_context(self) -> TeamConfig:
        if self.context is not None and self.context_file is not None:
            raise ValueError(f"team {self.name}: give context or context_file, not both")
        if self.context_file is not None:
            path = resolve_path(self.context_file)
            if path is None:
                raise ValueError(f"team {self.name}: no file {self.context_file!r}")
            object.__setattr__(self, "context", path.read_text())
            object.__setattr__(self, "context_file", None)
        if self.context is not None and not self.context.strip():
            raise ValueError(f"team {self.name}: the context is empty")
        return self


class _Deployed(_Strict):
    """A section that is one Serve deployment, with Serve's other options passed through."""

    section: ClassVar[str] = ""
    deployment: dict[str, Any] = Field(
        default_factory=dict, description="More Ray Serve deployment options "
        "(autoscaling_config, max_queued_requests, max_replicas_per_node, "
        "logging_config, ...), as a Serve config's `deployments:` entry takes them; "
        "validated by ray.serve.schema.DeploymentSchema. With autoscaling_config, "
        "Serve chooses the number of replicas (num_replicas is not used).")

    @field_validator("deployment")
    @classmethod
    def _deployment(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_deployment_options(v, set(cls.model_fields) - {"deployment"},
                                        cls.section)


class ReplicaConfig(_Deployed):
    section: ClassVar[str] = "replicas"
    num_replicas: int = Field(1, ge=1, description="LLM replicas (one engine each).")
    num_cpus: float = Field(1.0, ge=0, description="Logical CPUs the replica actor "
                            "reserves (on CPU, <= 1 lets several replicas share a node).")
    max_ongoing_requests: int = Field(256, ge=1, description="Per-replica concurrency cap.")
    health_check_period_s: float = Field(10.0, gt=0, description="How often Serve asks the "
                                         "engine for a round trip.")
    health_check_timeout_s: float = Field(30.0, gt=0, description="A slower answer fails "
                                          "the check; Serve restarts the replica.")
    graceful_shutdown_wait_loop_s: float = Field(1.0, gt=0, description="Drain poll period.")
    graceful_shutdown_timeout_s: float = Field(30.0, gt=0, description="How long a "
                                               "stopping replica drains its requests.")
    sync_period_s: float = Field(1.0, gt=0, description="How often a replica reconciles "
                                 "its prefixes with the registry and reports its stats.")
    stream_batch_ms: float = Field(0.0, ge=0, le=1000, description="Stream batching of "
                                   "a handle's calls (the agents' runs; HTTP streams "
                                   "are served in the replica): after a stream's first "
                                   "event, wait this long to send the events that "
                                   "arrived meanwhile as one item across the Ray "
                                   "handle; 0 sends at once, merging only events "
                                   "already waiting.")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env "
                                        "of the replicas (env_vars such as "
                                        "VLLM_CPU_KVCACHE_SPACE).")
    request_timeout_s: float = Field(600.0, gt=0, description="Longest wait for a "
                                     "request's first answer: the first chunk of a "
                                     "stream, a whole answer otherwise (504 after).")
    replica_wait_s: float = Field(10.0, gt=0, description="Longest wait for a replica to "
                                  "take a request (none running, or all at "
                                  "max_ongoing_requests): 503 with Retry-After after. "
                                  "deployment.max_queued_requests (default 4 x "
                                  "max_ongoing_requests) bounds how many may wait.")


class AuthConfig(_Strict):
    """Who may call the app. ``keys``: every route but /healthz and the OpenAPI document
    needs ``Authorization: Bearer <key>``; the key names the team (see auth.py for the
    keys file). ``none``: no keys, the team is the ``X-GraniKV-Team`` header (one trusted
    machine only)."""

    mode: Literal["keys", "none"] = Field("keys", description="keys (the default) or none.")
    keys_file: str | None = Field(None, description="The API keys file on every LLM "
                                  "replica's node (a mounted secret); default: the "
                                  "GRANIKV_API_KEYS_FILE environment variable.")
    reload_s: float = Field(5.0, gt=0, description="How often a replica looks for a "
                            "changed keys file (rotation without a restart).")


class LimitsConfig(_Strict):
    """Request limits; a request over one gets a 4xx that names it."""

    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="Largest request "
                                "body (413 above).")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Largest prompt, in "
                                          "tokens, after the chat template and the team "
                                          "context (400 above); default max_model_len.")
    max_prefix_tokens: int | None = Field(None, ge=1, description="Largest prefix or team "
                                          "context (400 above); default max_model_len - 1.")
    max_tokens: int = Field(4096, ge=1, description="Largest max_tokens / "
                            "max_completion_tokens a request may ask for (400 above); a "
                            "request that gives none gets vLLM's default (the room left "
                            "in max_model_len).")
    max_choices: int = Field(8, ge=1, description="Largest n and best_of (400 above).")
    # Fields whose cost is paid for every generated token, in the output path or the
    # engine core that every team's requests share (limits.per_token_work).
    max_stop: int = Field(16, ge=0, description="Most `stop` strings a request may give "
                          "(400 above); each is searched for after every token.")
    max_stop_chars: int = Field(1024, ge=0, description="Largest total length of a "
                                "request's `stop` strings, in characters (400 above).")
    max_stop_token_ids: int = Field(64, ge=0, description="Most `stop_token_ids` (400 "
                                    "above); the engine core scans them after every token.")
    max_bad_words: int = Field(64, ge=0, description="Most `bad_words` (400 above); each is "
                               "matched against the output before every token.")
    max_bad_words_chars: int = Field(1024, ge=0, description="Largest total length of a "
                                     "request's `bad_words`, in characters (400 above).")
    max_logit_bias: int = Field(300, ge=0, description="Most `logit_bias` entries (400 "
                                "above); applied to the logits of every step.")
    max_repetition_pattern: int = Field(64, ge=0, description="Largest "
                                        "`repetition_detection.max_pattern_size` (400 "
                                        "above); the engine core checks every pattern size "
                                        "up to it after every token.")
    # Each team's share of one replica's engine (team_share.py).
    team_max_sequences: int | None = Field(None, ge=1, description="Most sequences (a "
                                           "request counts n or best_of for each prompt) "
                                           "one team may have in flight on one replica, "
                                           "from admission until its answer, streamed or "
                                           "not, has ended; more wait in the team's own "
                                           "queue. Default: half the engine's "
                                           "max_num_seqs, so that a team at its share "
                                           "leaves room in the batch for the others.")
    team_max_queued: int = Field(32, ge=0, description="Most requests of one team that "
                                 "wait for its share on one replica; the next is a 429 "
                                 "with Retry-After. Keep the teams' in-flight and queued "
                                 "requests below replicas.max_ongoing_requests.")


class RegistryConfig(_Strict):
    name: str = Field("", description="Detached registry actor name; default "
                      "'<app name>-registry'.")
    namespace: str = Field("granikv", description="Ray namespace of the registry actor.")
    state_path: str | None = Field(None, description="JSON file the registry persists to, "
                                   "so that it also survives its own restart.")


class ResponsesConfig(_Strict):
    """The Responses API (``POST /v1/responses``): where stored responses live."""

    store_url: str | None = Field(None, description="The database of stored responses "
                                  "(``store``, ``previous_response_id``): a SQLite file on "
                                  "each replica's node (a follow-up then continues only on "
                                  "replicas of that node), or a postgresql:// URL the "
                                  "replicas share, e.g. the same database as the agents' "
                                  "threads. Default: <tmp>/granikv-<app>-responses.sqlite.")


class ServiceConfig(_Strict):
    """A small deployment next to the LLM replicas (e.g. the agents' run executor)."""

    name: str = Field(description="Its key in the LLM replicas' ``services`` (routes find "
                      "it there); the deployment is '<app>-<name>'.")
    cls: str = Field(description="'module:Class', constructed as Class(llm_handle, "
                     "config, options); Ray-free: the platform makes it a deployment.")
    num_replicas: int = Field(1, ge=1, description="1 for a service that owns a file.")
    num_cpus: float = Field(0.1, ge=0, description="Logical CPUs per replica.")
    max_ongoing_requests: int = Field(1024, ge=1)
    graceful_shutdown_timeout_s: float = Field(20.0, gt=0, description="How long a "
                                               "stopping replica may finish its work.")
    options: dict[str, Any] = Field(default_factory=dict, description="The class's own "
                                    "settings (validated by its validate_options).")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TEAM_RE.match(v):
            raise ValueError(f"service name {v!r} must match {TEAM_RE.pattern}")
        return v

    @field_validator("cls")
    @classmethod
    def _cls(cls, v: str) -> str:
        if v.count(":") != 1:
            raise ValueError(f"service class {v!r} must be 'module:Class'")
        return v


class PlatformConfig(_Strict):
    name: str = Field("granikv", description="Application name; prefixes deployment and "
                      "registry names.")
    model: ModelConfig
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig.model_validate({}))
    replicas: ReplicaConfig = Field(default_factory=lambda: ReplicaConfig.model_validate({}))
    registry: RegistryConfig = Field(default_factory=lambda: RegistryConfig.model_validate({}))
    auth: AuthConfig = Field(default_factory=lambda: AuthConfig.model_validate({}))
    limits: LimitsConfig = Field(default_factory=lambda: LimitsConfig.model_validate({}))
    responses: ResponsesConfig = Field(
        default_factory=lambda: ResponsesConfig.model_validate({}))
    frontend: dict[str, Any] = Field(
        default_factory=dict, description="vLLM's front-end options, as `vllm serve` "
        "takes them (enable_auto_tool_choice, tool_call_parser, chat_template, "
        "enable_prompt_tokens_details, response_role, ...): the fields of "
        "vllm.entrypoints.openai.cli_args.BaseFrontendArgs, validated by vLLM.")
    teams: list[TeamConfig] = Field(default_factory=list, description="Teams that get "
                                    "/teams/{team}/... routes.")
    extra_routers: list[str] = Field(default_factory=list, description="'module:factory' "
                                     "paths; factory() -> fastapi.APIRouter, mounted at /.")
    team_routers: list[str] = Field(default_factory=list, description="'module:factory' "
                                    "paths; factory(team: TeamConfig) -> APIRouter, mounted "
                                    "at /teams/{team} for each team.")
    services: list[ServiceConfig] = Field(default_factory=list, description="Extra "
                                          "deployments the routes reach by name "
                                          "(``ing.services[name]``).")

    @model_validator(mode="before")
    @classmethod
    def _no_ingress(cls, v: Any) -> Any:
        if isinstance(v, dict) and "ingress" in v:
            raise ValueError(
                "there is no ingress deployment: the LLM replicas serve HTTP themselves. "
                "Move ingress.request_timeout_s and ingress.replica_wait_s to replicas, "
                "and Serve options (max_queued_requests, ...) to replicas.deployment; "
                "drop ingress.num_replicas, num_cpus and max_ongoing_requests")
        return v

    @field_validator("teams")
    @classmethod
    def _unique_teams(cls, v: list[TeamConfig]) -> list[TeamConfig]:
        names = [t.name for t in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate teams {dup}")
        return v

    @field_validator("services")
    @classmethod
    def _unique_services(cls, v: list[ServiceConfig]) -> list[ServiceConfig]:
        names = [s.name for s in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate services {dup}")
        return v

    @field_validator("frontend")
    @classmethod
    def _frontend(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_frontend(v)

    @field_validator("extra_routers", "team_routers")
    @classmethod
    def _import_paths(cls, v: list[str]) -> list[str]:
        for path in v:
            if path.count(":") != 1:
                raise ValueError(f"router factory {path!r} must be 'module:function'")
        return v

    @property
    def registry_name(self) -> str:
        return self.registry.name or f"{self.name}-registry"

    @property
    def responses_store(self) -> str:
        """The stored responses' database URL, as the replica's node resolves it."""
        from granikv_platform.response_store import default_store_url  # aiosqlite's import

        return self.responses.store_url or default_store_url(self.name)

    def team(self, name: str) -> TeamConfig | None:
        return next((t for t in self.teams if t.name == name), None)

    def engine_args(self) -> dict[str, Any]:
        """Keyword arguments of vLLM's AsyncEngineArgs for one replica."""
        e = self.engine
        kw: dict[str, Any] = dict(e.engine_kwargs)
        extra = dict(kw.pop("additional_config", None) or {})
        extra["granikv"] = dict(e.granikv)
        kw.update(model=self.model.source, served_model_name=[self.model.model_id],
                  tensor_parallel_size=e.tensor_parallel_size, additional_config=extra)
        if self.model.tokenizer:
            kw["tokenizer"] = self.model.tokenizer
        if e.accelerator == "gpu" and e.tensor_parallel_size > 1:
            kw["distributed_executor_backend"] = "ray"  # workers go in the replica's PG
        return kw


@cache
def engine_arg_names() -> frozenset[str]:
    from vllm.engine.arg_utils import AsyncEngineArgs  # lazy: a heavy import

    return frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))

"""LLMReplica: the Serve deployment around one GraniKV engine (``EngineHost``), and the
application's HTTP ingress (``replica_http.py``: the FastAPI app is served in this
process, so a chat streams from vLLM to its response with no handle hop).

Start-up: engine, then the team contexts of the config seeded into the registry, then a
full reconcile with the registry (a restarted replica re-pins every prefix here), then one
real chat and completion (``warm_up``), then a background loop that reconciles and reports
stats every ``sync_period_s``: the first report is what /readyz waits for. Serve builds
the HTTP app once ``__init__`` has returned, so a replica takes no request before then.
Routes call the methods below in this process; the ``config.services`` (the agents' run
executor) call them through a handle, with a stream's chunks that are ready together
batched into one item (``stream_batch.py``). Each answers with ``protocol`` items. An
engine that dies (its core process gone) makes every method answer 503, and the
replica's process exits so that Serve starts a new one (``engine_watch``). Serve drains
a stopping replica (``graceful_shutdown_timeout_s``) before ``__del__`` shuts the
engine down.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from granikv_engine.config import GraniKVConfig
from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.prefix_registry import PrefixError, default_prefix_id
from granikv_platform.config import PlatformConfig
from granikv_platform.engine import PREFIX_HEADER, EngineHost
from granikv_platform.engine_files import EngineFiles
from granikv_platform.engine_stats import TeamUsage
from granikv_platform.engine_watch import (
    dead_answer,
    dead_stream,
    exit_when_dead,
    needs_engine,
)
from granikv_platform.errors import ApiError
from granikv_platform.hub import hub_client
from granikv_platform.identity import bind_body
from granikv_platform.limits import LimitExceeded, generation_body
from granikv_platform.placement import gpu_vllm_config
from granikv_platform.protocol import (
    NO_TEAM_CONTEXT,
    ErrorItem,
    Item,
    JsonItem,
    SseItem,
    error_item,
    headed,
    prefix_error_item,
    with_headers,
)
from granikv_platform.registry import (
    PrefixSpec,
    display_ids,
    scoped_id,
    team_id,
    variant_id,
)
from granikv_platform.replica_http import ReplicaHttp
from granikv_platform.request_path import ControlPlaneCalls, on_request_path
from granikv_platform.response_store import ResponseStore
from granikv_platform.responses import StoredResponses, team_of
from granikv_platform.schemas import PrefixCreate, record_view
from granikv_platform.stream_batch import batch_sse
from granikv_platform.sync import PrefixSync
from granikv_platform.team_share import (
    ShareFull,
    ShareTooLarge,
    TeamShare,
    sequences,
    share_limits,
)
from granikv_platform.warm_up import warm_up

logger = logging.getLogger("ray.serve")
DISPATCH_EVERY_S = 10.0  # how often a report asks the workers for their counters

class LLMReplica(ReplicaHttp):
    async def __init__(self, config: dict[str, Any],  # type: ignore[misc]
                       services: dict[str, DeploymentHandle] | None = None) -> None:
        """``services``: handles of the ``config.services`` by name (for their routes)."""
        self.cfg = PlatformConfig.model_validate(config)
        self.services = dict(services or {})
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.calls = ControlPlaneCalls()  # on the request path; shared by hub and engine
        self.hub = hub_client(self.cfg.registry_name, self.cfg.registry.namespace,
                              self.cfg.registry.state_path, calls=self.calls)
        args = self.cfg.engine_args()
        seed = self.cfg.engine.weight_seed if (
            self.cfg.engine.dummy_weights and self.cfg.engine.reinit_dummy_weights) else None
        EngineFiles.remove_dead()  # what the engines of killed replicas left here
        before = EngineFiles.before()
        self.engine = await EngineHost.start(args, await gpu_vllm_config(self.cfg, args), seed,
                                             self.cfg.limits.max_prompt_tokens,
                                             self.cfg.frontend)
        self._engine_files = EngineFiles.of_children(before)
        EngineFiles.remove_dead()  # those whose engine ended while this one started
        try:  # a replica that fails to start leaves no engine (nor its GPU memory) behind
            self.engine.calls = self.calls
            self.sync = PrefixSync(self.engine, self.hub, await self._hot_budgets())
            self.inflight = 0
            self.usage = TeamUsage()
            self.share = TeamShare(*share_limits(
                self.cfg, self.engine.llm.vllm_config.scheduler_config.max_num_seqs))
            self.stored = StoredResponses(await ResponseStore.open(self.cfg.responses_store))
            await self._seed_team_contexts()
            await self.sync.reconcile(force=True)
            self.warmup = await warm_up(self.engine, self.cfg.model.model_id, self.replica_id)
            await self._report()
        except BaseException:
            self._shutdown_engine()
            raise
        self._loop = asyncio.create_task(self._background())
        self._watch = asyncio.create_task(exit_when_dead(self.engine, self.replica_id,
                                                         self._leave))
        logger.info("GraniKV replica %s ready", self.replica_id)

    # ---- OpenAI (body normalized by the routes: vllm_xargs carry the caller's team) ---
    # A handle's calls (a service's): the stream's chunks that are ready together go as
    # one item. The routes read ``_items`` in this process, unbatched.
    async def chat(self, body: dict[str, Any]) -> AsyncIterator[Item]:
        async for item in self._batched(self._items("chat", body)):
            yield item

    async def completions(self, body: dict[str, Any]) -> AsyncIterator[Item]:
        async for item in self._batched(self._items("completions", body)):
            yield item

    async def team_chat(self, team: str, body: dict[str, Any],
                        context_id: str | None = None) -> AsyncIterator[Item]:
        async for item in self._batched(self._items("team_chat", team, body, context_id)):
            yield item

    async def responses(self, body: dict[str, Any]) -> AsyncIterator[Item]:
        async for item in self._batched(self._items("responses", body)):
            yield item

    async def team_responses(self, team: str, body: dict[str, Any],
                             context_id: str | None = None) -> AsyncIterator[Item]:
        async for item in self._batched(self._items("team_responses", team, body, context_id)):
            yield item

    async def stored_response(self, op: str, team: str, response_id: str) -> Item:
        return await self.stored.answer(op, team, response_id)  # responses.py

    def _batched(self, items: AsyncIterator[Item]) -> AsyncIterator[Item]:
        return batch_sse(items, self.cfg.replicas.stream_batch_ms / 1e3)

    def _items(self, method: str, *args: Any) -> AsyncIterator[Item]:
        if method == "chat":
            return self._serve(args[0], self.engine.chat)
        if method == "completions":
            return self._serve(args[0], self.engine.completions)
        if method == "team_chat":
            return self._team_chat(*args)
        if method == "responses":
            return self.stored.create(team_of(args[0]), args[0],
                                      lambda b: self._serve(b, self.engine.responses))
        if method == "team_responses":
            return self.stored.create(args[0], args[1], lambda b: self._team_chat(
                args[0], b, args[2], responses=True))
        raise ValueError(f"not a chat or completion method: {method!r}")

    async def _team_chat(self, team: str, body: dict[str, Any], context_id: str | None = None,
                         responses: bool = False) -> AsyncIterator[Item]:
        """A chat of ``team``'s agents: the team's context first, as its system message,
        and the request bound to the context's HOT prefix. The context comes from the
        local view and its tokens from its spec (rendered once, when it was set), so a
        team chat costs no registry call and no tokenization of the context. Without a
        context it is an ordinary chat scoped to the team. ``context_id``: the context
        the caller expects (an agent run pinned it); another one is a 409. ``responses``:
        a Responses API request (``POST /v1/responses``), not a chat."""
        context = await on_request_path(self.sync.fetch_context(team, context_id))
        if context_id is not None and (context is None or context.prefix_id
                                       != scoped_id(team, context_id)):
            now = context.team_id if context else "none"
            yield error_item(409, f"team {team!r}: its context changed (expected "
                             f"{team_id(scoped_id(team, context_id))!r}, now {now!r})")
            return
        try:
            bound = bind_body(body, team, context.prefix_id if context else None)
        except ApiError as e:
            yield error_item(e.status, e.message)
            return
        if context is None:
            plain = self.engine.responses if responses else self.engine.chat
            async for item in with_headers(self._serve(bound, plain),
                                           {PREFIX_HEADER: "miss; reason=no-context"}):
                yield item
            return
        admitted: dict[str, str] = {}

        async def admit() -> None:  # the context's state in the engine at admission
            admitted["state"] = await self.sync.engine_state(context.prefix_id)

        async def variant(tokens: tuple[int, ...]) -> tuple[str, str]:
            return await self.sync.ensure_variant(PrefixSpec(
                variant_id(context.prefix_id, tokens), team, tokens, pin=True,
                kind="variant"))

        def run(request: dict[str, Any]) -> AsyncIterator[Item]:
            spliced = self.engine.team_responses if responses else self.engine.team_chat
            return spliced(request, context, variant)

        first = True
        async for item in self._serve(bound, run, admit):
            state = admitted.get("state", "ready")
            if first and state != "ready":  # else the splice's own outcome (engine.py)
                item = headed(item, {PREFIX_HEADER: f"miss; reason=not-in-hot (state {state})"})
            first = False
            yield item

    async def _serve(self, body: dict[str, Any], run: Any,
                     admit: Callable[[], Awaitable[None]] | None = None
                     ) -> AsyncIterator[Item]:
        """``admit``: called once the request's prefix is held here, before the engine
        sees the request."""
        dead = self._dead()
        if dead is not None:
            yield dead
            return
        try:  # max_tokens and n, here: the agents' calls do not pass the routes
            body = generation_body(body, self.cfg.limits)
        except LimitExceeded as e:
            yield error_item(400, str(e))
            return
        xargs = body.get("vllm_xargs") or {}
        if "granikv_prefix_id" in xargs:
            try:  # this replica holds the prefix before the request is admitted
                await on_request_path(self.sync.ensure(xargs["granikv_team"],
                                                       xargs["granikv_prefix_id"]))
            except PrefixError as e:
                yield prefix_error_item(e)
                return
        team = str(xargs.get("granikv_team") or "")
        asked = sequences(body)
        try:  # the team's share of this engine, held until the answer has ended
            await self.share.acquire(team, asked)
        except (ShareFull, ShareTooLarge) as e:
            yield error_item(429 if isinstance(e, ShareFull) else 400, str(e))
            return
        self.usage.request(team)
        self.inflight += 1
        try:
            if admit is not None:
                await admit()
            async for item in run(body):
                if isinstance(item, ErrorItem) and item.status >= 500:
                    item = self._dead() or item  # the engine died under this request
                elif isinstance(item, SseItem):
                    if '{"error":' in item.text:  # the engine may have died under it
                        item = dead_stream(item, self._dead())
                    self.usage.chunks(team, item.text)
                elif isinstance(item, JsonItem):
                    self.usage.answer(team, item.body)
                yield item
        finally:
            self.inflight -= 1
            self.share.release(team, asked)

    @needs_engine
    async def tokenize(self, body: dict[str, Any]) -> Item:
        return await self.engine.tokenize_body(body)

    @needs_engine
    async def detokenize(self, body: dict[str, Any]) -> Item:
        return await self.engine.detokenize_body(body)

    # ---- prefix API (scoped to the calling team) ------------------------------------
    @needs_engine
    async def register_prefix(self, team: str, body: dict[str, Any]) -> Item:
        req = PrefixCreate.model_validate(body)
        tokens = req.token_ids
        if tokens is None:
            tokens = self.engine.tokenize(req.text or "")
        bad = self._check_tokens(tokens)
        if bad is not None:
            return bad
        spec = PrefixSpec(req.prefix_id or default_prefix_id(team, tokens), team,
                          tuple(tokens), pin=req.pin)
        try:
            created = await self.sync.add(spec)
            return JsonItem(await self._view(spec), 201 if created else 200)
        except PrefixError as e:
            return prefix_error_item(e)

    @needs_engine
    async def get_prefix(self, team: str, prefix_id: str) -> Item:
        try:
            spec = await self.sync.ensure(team, prefix_id, fresh=True)
            return JsonItem(await self._view(spec))
        except PrefixError as e:
            return prefix_error_item(e)

    @needs_engine
    async def list_prefixes(self, team: str) -> Item:
        await self.sync.reconcile()  # answer from a replica that matches the registry
        records = {r["prefix_id"]: r for r in await self.engine.list_prefixes()}
        specs = await self.hub.list_specs(team)
        return JsonItem({"object": "list", "data": [
            record_view(s, records.get(s.prefix_id, {})) for s in specs]})

    @needs_engine
    async def delete_prefix(self, team: str, prefix_id: str) -> Item:
        try:
            spec = await self.sync.remove(prefix_id, team)
            return JsonItem({"prefix_id": spec.team_id, "deleted": True})
        except PrefixError as e:
            return prefix_error_item(e)

    # ---- team contexts ------------------------------------------------------------
    @needs_engine
    async def set_team_context(self, team: str, text: str, source: str = "api") -> Item:
        try:
            tokens = await self.engine.render_system(text)
        except ValueError as e:  # the chat template refused it
            return error_item(400, f"cannot render the context: {e}")
        bad = self._check_tokens(tokens)
        if bad is not None:
            return bad
        spec = PrefixSpec(f"{team}-context-{default_prefix_id(team, tokens)[-12:]}", team,
                          tuple(tokens), pin=True, kind="context", text=text,
                          source=source)  # type: ignore[arg-type]
        try:
            await self.sync.set_context(spec)
        except PrefixError as e:  # past the team's HOT budget
            return prefix_error_item(e)
        return await self.get_team_context(team)

    @needs_engine
    async def get_team_context(self, team: str) -> Item:
        """The registry's answer (a PUT through another replica shows at once); team
        chats use the local view, which follows within ``sync_period_s``."""
        spec = await self.hub.context(team)
        if spec is None:
            return error_item(404, f"team {team!r} has no context; PUT /teams/{team}/context",
                              NO_TEAM_CONTEXT)
        try:
            await self.sync.ensure(team, spec.prefix_id)
        except PrefixError as e:  # replaced meanwhile
            return prefix_error_item(e)
        return JsonItem({**await self._view(spec), "text": spec.text})

    # ---- health, stats, shutdown --------------------------------------------------
    async def check_health(self) -> None:
        """Fails at once when the engine died (vLLM's ``errored``), else unless the
        engine core answers a round trip."""
        await self.engine.check_health()

    def _dead(self) -> Item | None:
        return dead_answer(self.__dict__.get("engine"))

    async def _leave(self) -> None:
        """What a replica whose engine died does before its process exits."""
        try:
            async with asyncio.timeout(2.0):
                await self.hub.forget(self.replica_id)
        finally:
            self._shutdown_engine()  # the front end's sockets and shared memory

    async def stats(self) -> dict[str, Any]:
        """The workers' dispatcher counters are at most ``DISPATCH_EVERY_S`` old."""
        records = await self.engine.list_prefixes()
        pinned = sum(1 for r in records if r["pinned"])
        # Per prefix: which team's HOT prefix served how many requests on this replica.
        shown = display_ids((r["prefix_id"], r["team"]) for r in records)
        per_prefix = {shown[r["prefix_id"]]: {k: r[k] for k in ("team", "hits", "pinned",
                                                                  "state")} for r in records}
        return {"replica": self.replica_id, "model": self.cfg.model.model_id,
                "inflight": self.inflight, "pinned_prefixes": pinned,
                "teams": self.usage.snapshot(), "team_share": self.share.snapshot(),
                "warmup_s": self.warmup, "pid": os.getpid(),
                "prefix_hits": per_prefix, "registry_version": self.sync.version,
                "sync_changes": self.sync.applied,
                "request_path": {"hub_calls": self.calls.hub,
                                 "engine_calls": self.calls.engine,
                                 "fast_binds": self.sync.binds.fast,
                                 "slow_binds": self.sync.binds.slow,
                                 "context_spliced": self.engine.splices.spliced,
                                 "context_variants": self.engine.splices.variants,
                                 "context_rendered": self.engine.splices.rendered},
                **await self.engine.stats(DISPATCH_EVERY_S)}

    async def __del__(self) -> None:
        """Also runs after a failed ``__init__``: only what was made is undone."""
        for task in (getattr(self, "_loop", None), getattr(self, "_watch", None)):
            if task is not None:
                task.cancel()
        try:
            if hasattr(self, "stored"):
                await self.stored.close()
            if hasattr(self, "hub"):
                await self.hub.forget(self.replica_id)
        finally:
            self._shutdown_engine()

    def _shutdown_engine(self) -> None:
        engine: EngineHost | None = self.__dict__.pop("engine", None)
        if engine is not None:
            engine.shutdown()
        files: EngineFiles | None = self.__dict__.pop("_engine_files", None)
        if files is not None:
            files.remove_left()

    # ---- internals ----------------------------------------------------------------
    async def _view(self, spec: PrefixSpec) -> dict[str, Any]:
        rec = await self.engine.get_prefix(spec.prefix_id, spec.team)
        return record_view(spec, rec)

    def _prefix_limit(self) -> tuple[int, str]:
        """The most tokens a prefix may have, and why."""
        limit = self.engine.max_model_len - 1  # room for one token of the request's own
        why = f"max_model_len {limit + 1} leaves room for the request's own"
        configured = self.cfg.limits.max_prefix_tokens
        if configured is not None and configured < limit:
            limit, why = configured, "limits.max_prefix_tokens"
        return limit, why

    async def _hot_budgets(self) -> TeamBudgets:
        """Each team's HOT budget, set in this engine (an equal share of its arena by
        default) and checked by the registry (``PrefixSync``)."""
        default = GraniKVConfig.from_dict(self.cfg.engine.granikv).team_hot_slots
        got = await self.engine.set_hot_budgets(
            {t.name: t.hot_slots for t in self.cfg.teams}, default, self._prefix_limit()[0])
        budgets = TeamBudgets(int(got["default"]), dict(got["teams"]))
        if budgets.total() > int(got["arena"]):
            logger.warning("GraniKV: the teams' HOT budgets add up to %d slots, more than "
                           "the arena's %d: a team within its budget may find the arena "
                           "full (its prefixes are then COLD)", budgets.total(), got["arena"])
        return budgets

    def _check_tokens(self, tokens: list[int]) -> Item | None:
        limit, why = self._prefix_limit()
        if not tokens or len(tokens) > limit:
            return error_item(400, f"a prefix needs 1 to {limit} tokens ({why}); got "
                              f"{len(tokens)}")
        vocab = self.engine.vocab_size
        if any(t < 0 or t >= vocab for t in tokens):
            return error_item(400, f"token ids must be in [0, {vocab})")
        return None

    async def _seed_team_contexts(self) -> None:
        """Configured contexts go to the registry unless the API replaced them since."""
        for team in self.cfg.teams:
            if team.context is None:
                continue
            current = await self.hub.context(team.name)
            if current is None or (current.source == "config" and current.text != team.context):
                done = await self.set_team_context(team.name, team.context, source="config")
                if isinstance(done, ErrorItem):
                    logger.error("GraniKV: team %s's configured context not set: %s",
                                 team.name, done.message)

    async def _background(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.replicas.sync_period_s)
            try:
                await self.sync.reconcile()
                await self._report()
            except Exception:  # keep syncing; the next round retries
                logger.exception("GraniKV replica %s: sync failed", self.replica_id)

    async def _report(self) -> None:
        await self.hub.report(self.replica_id, await self.stats())

"""RunService: the run executor of one platform app, as a small Serve deployment.

The platform deploys it from ``config.services`` (``granikv_platform.builder``: one
replica, named ``<app>-agents``) with a handle to the app's LLM replicas, and their
``/teams/{team}/runs`` routes (``rest.py``) call it through a handle. It owns the SQLite
file (checkpoints + run store): one writer, whatever the number of LLM replicas. Runs
call the LLM replicas through ``ServeTeamBackend`` (no HTTP hop). When Serve restarts
it, ``__init__`` resumes the runs its predecessor left unfinished.

Methods answer with the platform's protocol items (``{"json"}``, ``{"sse"}``,
``{"error": {status, type, message}}``), scoped to the calling team: another team's run
or spec file is 404, as an unknown one is (as for prefixes). Errors name the run, the
spec or the graph, never a path or a replica's internals (those go to the log). A spec
that names a graph is checked when it is submitted: its module must be among the
service's ``graph_modules`` (nothing else is imported), and ``/runs`` runs the built-in
workflows only (a graph of one's own runs as an assistant of the threads API). No Ray
import: the platform wraps it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

from granikv_agents.binding import TeamBackend
from granikv_agents.chat_model import TeamChatModel
from granikv_agents.executor import RunConflict, RunExecutor, RunNotFound
from granikv_agents.graph import RunContext
from granikv_agents.graphs import GraphLoadError, GraphNotAllowed, resolve
from granikv_agents.schemas import AgentsOptions
from granikv_agents.serve_binding import ServeTeamBackend
from granikv_agents.service_handle import SERVICE_NAME  # noqa: F401  (re-exported)
from granikv_agents.spec import TeamSpec
from granikv_agents.spec_file import SpecFileError, find_spec, load_spec, spec_names
from granikv_agents.store import RunRecord
from granikv_agents.team import Team
from granikv_agents.threads.api import ThreadApi
from granikv_agents.threads.executor import ThreadExecutor
from granikv_agents.threads.fit import ReplicaFit
from granikv_platform.protocol import ErrorItem, Item, JsonItem, SseItem, error_item


class RunService:
    # Serve runs async constructors; the platform's LLMReplica does the same.
    async def __init__(self, llm: Any, config: dict[str, Any],  # type: ignore[misc]
                       options: dict[str, Any]) -> None:
        # ``config`` was validated by the platform's build_app; reading three fields here
        # spares this replica the validation's vLLM import.
        self.opts = AgentsOptions.model_validate(options)
        self.model = str(config["model"]["model_id"])
        self._llm = llm
        self._stack = AsyncExitStack()
        self.executor = await self._stack.enter_async_context(RunExecutor.open(
            self.opts.store_file(str(config.get("name", "granikv"))), self._bind,
            self.opts.retry.config(), self.opts.drain_s))
        if self.opts.auto_resume:
            await self.executor.recover()
        fit = ReplicaFit(llm, self.model, (config.get("limits") or {}).get("max_prompt_tokens"))
        threads = await self._stack.enter_async_context(ThreadExecutor.open(
            self.opts.threads_store(str(config.get("name", "granikv"))), self._assistants,
            self._run_context, self.opts.auto_resume, fit))
        self.threads_api = ThreadApi(threads, self._described, self.opts.sse_ping_s)

    @staticmethod
    def validate_options(options: dict[str, Any]) -> None:
        """Called by the platform's build_app: bad options fail before anything starts."""
        AgentsOptions.model_validate(options)

    def _bind(self, team: Team) -> TeamBackend:
        return ServeTeamBackend(self._llm, team.name, self.model,
                                timeout_s=self.opts.call_timeout_s)

    def _run_context(self, team: Team) -> RunContext:
        """A thread run's runtime context: the team's backend and its chat model (the
        first agent's sampling, if it has agents)."""
        backend = self._bind(team)
        first = team.agents[0] if team.agents else None
        model = TeamChatModel(backend=backend, context=team.context,
                              agent=first.name if first else "agent",
                              max_tokens=first.sampling.max_tokens if first else
                              team.limits.max_tokens,
                              temperature=first.sampling.temperature if first else 0.0,
                              seed=first.sampling.seed if first else None)
        return RunContext.of(team, backend, model)

    def _specs(self, team: str) -> dict[str, TeamSpec]:
        folder = self.opts.specs_folder()
        specs = {name: load_spec(folder / f"{name}.yaml") for name in spec_names(folder)}
        return {name: s for name, s in specs.items() if s.team == team}

    def _assistants(self, team: str) -> dict[str, Team]:
        return {name: s.to_team() for name, s in self._specs(team).items()}

    def _described(self, team: str) -> dict[str, str]:
        return {name: s.description for name, s in self._specs(team).items()}

    # ---- threads (LangGraph Server's API, threads/routes.py) ---------------------------
    async def threads(self, team: str, op: str, args: dict[str, Any]) -> Item:
        return await self.threads_api.call(team, op, args)

    async def thread_events(self, team: str, thread_id: str, run_id: str,
                            after: int = 0) -> AsyncIterator[Item]:
        async for item in self.threads_api.events(team, thread_id, run_id, after):
            yield item

    # ---- runs of the calling team -------------------------------------------------------
    async def start(self, team: str, body: dict[str, Any]) -> Item:
        try:
            spec = self._spec(team, body)
            self._check_graph(spec)
        except (SpecFileError, FileNotFoundError, PermissionError, GraphLoadError) as e:
            return _error(e)
        rec = await self.executor.start(spec, body.get("task"))
        return JsonItem(_created(rec), 201)

    async def get(self, team: str, run_id: str) -> Item:
        try:
            await self._owned(team, run_id)
            return JsonItem(await self.executor.view(run_id))
        except RunNotFound as e:
            return _error(e)

    async def list_runs(self, team: str, limit: int = 100, offset: int = 0) -> Item:
        runs = await self.executor.store.list_runs(team, limit=limit + 1, offset=offset)
        return JsonItem({"object": "list", "data": [r.view() for r in runs[:limit]],
                         "has_more": len(runs) > limit})

    async def resume(self, team: str, run_id: str) -> Item:
        try:
            await self._owned(team, run_id)
            rec = await self.executor.resume(run_id)
        except (RunNotFound, RunConflict) as e:
            return _error(e)
        return JsonItem(rec.view())

    async def events(self, team: str, run_id: str, after: int = 0) -> AsyncIterator[Item]:
        """Server-sent events: ``id`` = the event's seq (resume with Last-Event-ID)."""
        try:
            await self._owned(team, run_id)
        except RunNotFound as e:
            yield _error(e)
            return
        async for ev in self.executor.events(run_id, after):
            yield SseItem(f"id: {ev.seq}\nevent: {ev.type}\ndata: {json.dumps(ev.view())}\n\n")
        yield SseItem("event: end\ndata: {}\n\n")

    async def __del__(self) -> None:
        await self._stack.aclose()  # drains the runs (see RunExecutor.stop)

    # ---- internals ------------------------------------------------------------------
    def _spec(self, team: str, body: dict[str, Any]) -> TeamSpec:
        if body.get("spec") is not None:
            spec = TeamSpec.model_validate(body["spec"])  # validated by the route too
            if spec.team != team:  # the caller's own body: refusing it reveals nothing
                raise PermissionError(f"the spec is team {spec.team!r}'s; team {team!r} "
                                      "may not run it")
            return spec
        name = str(body["spec_name"])
        spec = find_spec(self.opts.specs_folder(), name)
        if spec.team != team:  # another team's spec file is as absent as none
            raise FileNotFoundError(f"no team spec {name!r}")
        return spec

    def _check_graph(self, spec: TeamSpec) -> None:
        """A spec's own graph: allowed, importable, and then refused here all the same
        (the runs below run the built-in workflows, and would spend its turns first)."""
        if spec.graph is None:
            return
        try:
            resolve(spec.graph, self.opts.graph_modules)
        except GraphNotAllowed as e:
            raise GraphNotAllowed(f"{e.args[0]} (the agents service's option "
                                  "graph_modules)") from None
        raise GraphLoadError(f"graph {spec.graph!r}: /runs runs the built-in workflows; a "
                             "spec with a graph of its own runs as an assistant of the "
                             "threads API")

    async def _owned(self, team: str, run_id: str) -> RunRecord:
        return await self.executor.record(run_id, team)


def _created(rec: RunRecord) -> dict[str, Any]:
    base = f"/teams/{rec.team}/runs/{rec.run_id}"
    return {**rec.view(), "links": {"self": base, "events": f"{base}/events",
                                    "resume": f"{base}/resume"}}


def _error(e: Exception) -> ErrorItem:
    status = {RunNotFound: 404, FileNotFoundError: 404, PermissionError: 403,
              RunConflict: 409, SpecFileError: 400, GraphLoadError: 400,
              GraphNotAllowed: 400}.get(type(e), 400)
    message = str(e.args[0]) if e.args else type(e).__name__  # KeyError's str() quotes
    return error_item(status, message)

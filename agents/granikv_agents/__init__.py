"""GraniKV agent teams: LangGraph workflows whose shared context is a pinned HOT prefix.

    from granikv_agents import HttpTeamBackend, RunExecutor, load_spec

    spec = load_spec("deploy/teams/review.yaml")            # a team spec (YAML, pydantic)
    async with RunExecutor.open("runs.sqlite",               # or postgresql://...
                                lambda team: HttpTeamBackend(url, team.name,
                                                             api_key=key)) as ex:
        run = await ex.start(spec)                          # run id = checkpoint thread
        await ex.wait(run.run_id)
        print(await ex.view(run.run_id))                    # turns, result, context pin

A team may run its own LangGraph graph (``graph: module:function`` in its spec), built
with the pieces of ``granikv_agents.kit``. On a platform app, ``granikv_agents.rest:
runs_router`` (``config.team_routers``) and ``granikv_agents.service:RunService``
(``config.services``, name ``agents``) serve ``/teams/{team}/runs`` and LangGraph
Server's threads and runs (``langgraph-sdk``). See agents/README.md.
"""

from __future__ import annotations

from granikv_agents.binding import (
    LLMCallError,
    Reply,
    TeamBackend,
    TransientLLMError,
    TurnRequest,
)
from granikv_agents.chat_model import TeamChatModel
from granikv_agents.executor import RunExecutor
from granikv_agents.graph import RetryConfig, RunContext, build_graph
from granikv_agents.graphs import team_graph
from granikv_agents.http_binding import HttpTeamBackend
from granikv_agents.serve_binding import ServeTeamBackend
from granikv_agents.spec import TeamSpec
from granikv_agents.spec_file import load_spec
from granikv_agents.team import Team
from granikv_agents.threads.executor import ThreadExecutor

__all__ = [
    "HttpTeamBackend",
    "LLMCallError",
    "Reply",
    "RetryConfig",
    "RunContext",
    "RunExecutor",
    "ServeTeamBackend",
    "Team",
    "TeamBackend",
    "TeamChatModel",
    "TeamSpec",
    "ThreadExecutor",
    "TransientLLMError",
    "TurnRequest",
    "build_graph",
    "load_spec",
    "team_graph",
]

"""Pieces of the thread tests that need LangGraph only: a scripted tool-calling chat
model, a runtime context without a platform, and a real PostgreSQL server (the
``pgserver`` wheel: its own binaries, started in a temporary folder)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from granikv_agents.graph import RunContext
from granikv_agents.spec import TeamSpec
from granikv_agents.team import Team


class ScriptedModel(GenericFakeChatModel):
    """Answers with the scripted messages in order; ``bind_tools`` keeps the script
    (the tool calls are scripted) and records the tools' names. Not streamed: the fake's
    stream would drop the tool calls."""

    bound: list[str] = Field(default_factory=list)
    disable_streaming: bool = True

    def bind_tools(self, tools: Sequence[Any], **kw: Any) -> ScriptedModel:  # type: ignore[override]
        self.bound = sorted(getattr(t, "name", str(t)) for t in tools)
        return self


def script(*replies: AIMessage | str) -> ScriptedModel:
    return ScriptedModel(messages=iter([r if isinstance(r, AIMessage) else AIMessage(r)
                                        for r in replies]))


class NoPlatform:
    """The backend of runs whose graphs never call the platform (the model is given)."""

    team = "t"

    async def pin_context(self, text: str) -> Any:
        raise AssertionError("this graph must not pin a context")

    async def read_context(self) -> Any:
        raise AssertionError("this graph must not read the context")

    async def chat(self, request: Any, context: Any) -> Any:
        raise AssertionError("this graph calls its chat model, not the backend")

    async def aclose(self) -> None:
        return None


def own_team(graph: str, team: str = "t", agents: int = 1, **over: Any) -> Team:
    return TeamSpec.model_validate({
        "team": team, "context": "The shared context.", "graph": graph,
        "agents": [{"name": f"a{i}", "role": f"Role {i}."} for i in range(agents)], **over,
    }).to_team()


class Echo(BaseChatModel):
    """Answers ``<agent>@<n>`` (n: its calls so far) and records what each agent was
    asked: ``(agent, last message)``. ``kit.team_model`` sets ``agent`` per call."""

    agent: str = "?"
    seen: list[tuple[str, str]] = Field(default_factory=list)  # shared by copies

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:
        self.seen.append((self.agent, str(messages[-1].content)))
        text = f"{self.agent}@{sum(a == self.agent for a, _ in self.seen)}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def context_with(model: Any) -> Any:
    """A ``context_of`` for the executor: every run gets ``model``."""
    def of(team: Team) -> RunContext:
        return RunContext(NoPlatform(), asyncio.Semaphore(4), team, model)  # type: ignore[arg-type]
    return of


def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server in a fresh folder; its URL. As root, pgserver runs the
    server as another user, which must reach the folder: hence a folder directly in the
    temporary directory (pytest's sit in a root-only one)."""
    import pgserver

    folder = Path(tempfile.mkdtemp(prefix="granikv-pg-"))
    srv = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield str(srv.get_uri())
    finally:
        srv.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at ``server_url``; its URL."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    name = f"granikv_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


class Stalls(ScriptedModel):
    """Answers its ``answers`` first calls from the script, then never: the run stays in
    flight until its process is killed."""

    answers: int = 1

    async def _agenerate(self, *a: Any, **k: Any) -> Any:
        if self.answers <= 0:
            await asyncio.Event().wait()
        self.answers -= 1
        return await super()._agenerate(*a, **k)


async def serve_until_killed(url: str, thread_id: str, assistants: Any) -> None:
    """The executor process that the restart test kills: one run of the tools graph that
    calls a tool, then stalls in its second model call."""
    from granikv_agents.threads.executor import ThreadExecutor

    call = AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b c"},
                                      "id": "call-1"}])
    async with ThreadExecutor.open(url, assistants, context_with(Stalls(
            messages=iter([call])))) as ex:
        await ex.create_thread("t", thread_id)
        await ex.create_run("t", thread_id, {"assistant_id": "tools", "input": {
            "messages": [{"role": "user", "content": "Count: a b c"}]}})
        await asyncio.Event().wait()


class Held(BaseChatModel):
    """Answers ``answer to <last message>`` once ``gate`` is set; records each call's
    last message. ``fail``: raise instead, for messages that contain it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    gate: asyncio.Event = Field(default_factory=asyncio.Event)
    calls: list[str] = Field(default_factory=list)
    fail: str | None = None

    @property
    def _llm_type(self) -> str:
        return "held"

    def bind_tools(self, tools: Any, **kw: Any) -> Held:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kw: Any) -> ChatResult:
        raise NotImplementedError("async only")

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None,
                         run_manager: Any = None, **kw: Any) -> ChatResult:
        last = str(messages[-1].content)
        self.calls.append(last)
        await self.gate.wait()
        if self.fail is not None and self.fail in last:
            raise ValueError(f"the model refused {last!r}")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"answer to {last}"))])

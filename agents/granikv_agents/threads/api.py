"""ThreadApi: the thread executor as the run service exposes it through a Serve handle.

One ``call(team, op, args)`` for every JSON route (its answer is a protocol item:
``JsonItem`` or ``ErrorItem``, scoped to the calling team), one ``events`` generator of
server-sent events (``id`` = the event's seq; ``: ping`` comments keep an idle stream
alive; a final ``end`` once the run stopped). The team's assistants are its spec files
(name = assistant id).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from granikv_agents.spec_file import SpecFileError
from granikv_agents.threads.describe import graph_view, schemas_view
from granikv_agents.threads.executor import ThreadError, ThreadExecutor
from granikv_agents.threads.views import assistant_view, run_view
from granikv_platform.protocol import Item, JsonItem, SseItem, error_item

_OPS = frozenset({"search_assistants", "get_assistant", "assistant_graph",
                  "assistant_schemas", "create_thread", "get_thread", "update_thread",
                  "delete_thread", "copy_thread", "state", "history", "update_state",
                  "search_threads", "create_run", "get_run", "list_runs", "join", "cancel"})


class ThreadApi:
    def __init__(self, executor: ThreadExecutor, described: Callable[[str], dict[str, str]],
                 ping_s: float) -> None:
        self.ex = executor
        self.described = described  # team -> assistant id -> description
        self.ping_s = ping_s

    async def call(self, team: str, op: str, args: dict[str, Any]) -> Item:
        if op not in _OPS:
            return error_item(404, f"no operation {op!r}")
        try:
            return JsonItem(await getattr(self, f"_{op}")(team, **args))
        except (ThreadError, SpecFileError, ValueError) as e:
            status = e.status if isinstance(e, ThreadError) else 422
            return error_item(status, str(e.args[0]) if e.args else type(e).__name__)

    async def events(self, team: str, thread_id: str, run_id: str,
                     after: int = 0) -> AsyncIterator[Item]:
        try:
            await self.ex.run(team, thread_id, run_id)
        except ThreadError as e:
            yield error_item(e.status, str(e))
            return
        async for ev in self.ex.events(team, thread_id, run_id, after, self.ping_s):
            if ev is None:
                yield SseItem(": ping\n\n")
            else:
                yield SseItem(f"id: {ev.seq}\nevent: {ev.event}\n"
                              f"data: {json.dumps(ev.data)}\n\n")
        yield SseItem("event: end\ndata: null\n\n")  # the run stopped: nothing follows

    # ---- operations (JSON-able answers) --------------------------------------------------
    async def _search_assistants(self, team: str, limit: int = 10,
                                 offset: int = 0) -> list[dict[str, Any]]:
        found = sorted(self.described(team).items())[offset:offset + limit]
        return [assistant_view(a, team, d) for a, d in found]

    async def _get_assistant(self, team: str, assistant_id: str) -> dict[str, Any]:
        self.ex.assistant(team, assistant_id)
        return assistant_view(assistant_id, team, self.described(team)[assistant_id])

    async def _assistant_graph(self, team: str, assistant_id: str,
                               xray: int | bool = False) -> dict[str, Any]:
        return graph_view(self.ex.graph(team, assistant_id), xray)

    async def _assistant_schemas(self, team: str, assistant_id: str) -> dict[str, Any]:
        return schemas_view(assistant_id, self.ex.graph(team, assistant_id))

    async def _create_thread(self, team: str, thread_id: str | None = None,
                             metadata: dict[str, Any] | None = None,
                             if_exists: str = "raise") -> dict[str, Any]:
        return await self.ex.create_thread(team, thread_id, metadata, if_exists)

    async def _get_thread(self, team: str, thread_id: str) -> dict[str, Any]:
        return await self.ex.get_thread(team, thread_id)

    async def _update_thread(self, team: str, thread_id: str,
                             metadata: dict[str, Any]) -> dict[str, Any]:
        return await self.ex.update_thread(team, thread_id, metadata)

    async def _delete_thread(self, team: str, thread_id: str) -> None:
        await self.ex.delete_thread(team, thread_id)

    async def _copy_thread(self, team: str, thread_id: str) -> dict[str, Any]:
        return await self.ex.copy_thread(team, thread_id)

    async def _state(self, team: str, thread_id: str,
                     checkpoint_id: str | None = None) -> dict[str, Any]:
        return await self.ex.state(team, thread_id, checkpoint_id)

    async def _history(self, team: str, thread_id: str, limit: int = 10,
                       before: str | None = None, metadata: dict[str, Any] | None = None,
                       checkpoint_id: str | None = None) -> list[dict[str, Any]]:
        return await self.ex.history(team, thread_id, limit, before, metadata, checkpoint_id)

    async def _update_state(self, team: str, thread_id: str, values: Any,
                            as_node: str | None = None,
                            checkpoint_id: str | None = None) -> dict[str, Any]:
        return await self.ex.update_state(team, thread_id, values, as_node, checkpoint_id)

    async def _search_threads(self, team: str, limit: int = 10,
                              offset: int = 0) -> list[dict[str, Any]]:
        return await self.ex.search_threads(team, limit, offset)

    async def _create_run(self, team: str, thread_id: str,
                          body: dict[str, Any]) -> dict[str, Any]:
        return await self.ex.create_run(team, thread_id, body)

    async def _get_run(self, team: str, thread_id: str, run_id: str) -> dict[str, Any]:
        return run_view(await self.ex.run(team, thread_id, run_id))

    async def _list_runs(self, team: str, thread_id: str, limit: int = 10, offset: int = 0,
                         status: str | None = None) -> list[dict[str, Any]]:
        return await self.ex.list_runs(team, thread_id, limit, offset, status)

    async def _join(self, team: str, thread_id: str, run_id: str) -> dict[str, Any]:
        return await self.ex.join(team, thread_id, run_id)

    async def _cancel(self, team: str, thread_id: str, run_id: str,
                      wait: bool = False) -> None:
        await self.ex.cancel(team, thread_id, run_id, wait)


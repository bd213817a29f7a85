"""What a run streams: LangGraph's stream modes, and LangGraph Server's ``events`` mode.

``events`` is LangChain's ``astream_events`` (v2): every start, stream and end of the
graph, its nodes and its model calls. With it, the other modes asked for come from the
same pass: the graph's own stream chunks (``on_chain_stream`` of the root run, whose
chunk is a ``(mode, data)`` pair) are sent under their mode as well.

LangGraph's ``messages`` pairs go out as LangGraph Server sends them: under
``messages-tuple``, as they are (event ``messages``); under ``messages`` (without
``messages-tuple``, which wins when both are asked, as in LangGraph Server), as
``messages/metadata``, ``messages/partial`` and ``messages/complete`` (messages.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from granikv_agents.threads.messages import MessageEvents
from granikv_agents.threads.wire import STREAM_MODES


@dataclass(frozen=True)
class RunStream:
    """How a run is streamed: its modes as the client named them (``events`` and
    ``messages-tuple`` included) and where it pauses (node names, or ``"*"``: every
    node)."""

    modes: tuple[str, ...]
    interrupt_before: list[str] | str | None = None
    interrupt_after: list[str] | str | None = None

    async def chunks(self, graph: Any, payload: Any, config: RunnableConfig,
                     context: Any) -> AsyncIterator[tuple[str, Any]]:
        """``(event, data)`` pairs: ``events`` data are the events' dicts."""
        tuples = "messages-tuple" in self.modes
        whole = MessageEvents()
        graph_chunks = self._graph_chunks(graph, payload, config, context)
        async with aclosing(graph_chunks) as stream:
            async for mode, chunk in stream:
                if mode == "messages" and not tuples:
                    for pair in whole.events(*chunk):
                        yield pair
                else:
                    yield mode, chunk

    async def _graph_chunks(self, graph: Any, payload: Any, config: RunnableConfig,
                            context: Any) -> AsyncGenerator[tuple[str, Any], None]:
        """LangGraph's ``(mode, chunk)`` pairs, and ``("events", event)``."""
        graph_modes = sorted({STREAM_MODES[m] for m in self.modes if m != "events"})
        kwargs = {"context": context, "durability": "sync",
                  "interrupt_before": self.interrupt_before,
                  "interrupt_after": self.interrupt_after}
        if "events" not in self.modes:
            async with aclosing(graph.astream(payload, config, stream_mode=graph_modes,
                                              **kwargs)) as stream:
                async for mode, chunk in stream:
                    yield mode, chunk
            return
        events = graph.astream_events(payload, config, version="v2",
                                      stream_mode=graph_modes or ["values"], **kwargs)
        async with aclosing(events) as stream:
            async for ev in stream:
                yield "events", ev
                if ev["event"] == "on_chain_stream" and not ev.get("parent_ids"):
                    mode, chunk = ev["data"]["chunk"]
                    if mode in graph_modes:
                        yield mode, chunk

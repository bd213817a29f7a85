"""What a run streams: LangGraph's stream modes, and LangGraph Server's ``events`` mode.

``events`` is LangChain's ``astream_events`` (v2): every start, stream and end of the
graph, its nodes and its model calls. With it, the other modes asked for come from the
same pass: the graph's own stream chunks (``on_chain_stream`` of the root run, whose
chunk is a ``(mode, data)`` pair) are sent under their mode as well.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig


@dataclass(frozen=True)
class RunStream:
    """How a run is streamed: its modes as asked (``events`` included) and where it
    pauses (node names, or ``"*"``: every node)."""

    modes: tuple[str, ...]
    interrupt_before: list[str] | str | None = None
    interrupt_after: list[str] | str | None = None

    async def chunks(self, graph: Any, payload: Any, config: RunnableConfig,
                     context: Any) -> AsyncIterator[tuple[str, Any]]:
        """``(mode, chunk)`` pairs; ``events`` chunks are the events' dicts."""
        graph_modes = [m for m in self.modes if m != "events"]
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

"""A thread's checkpoints through its graph: the state (at a checkpoint), the history,
a state update. ``thread`` is the checkpoint thread (``ThreadRecord.checkpoint_thread``),
``thread_id`` the client's, which the answers show."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import InvalidUpdateError
from langgraph.pregel import Pregel

from granikv_agents.threads.options import OptionError, check_values
from granikv_agents.threads.wire import checkpoint_ref, state_view

Graph = Pregel[Any, Any, Any, Any]


def config_of(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable, "recursion_limit": 100}


async def read_state(graph: Graph, thread: str, thread_id: str,
                     checkpoint_id: str | None = None) -> dict[str, Any] | None:
    """The state (at ``checkpoint_id``); None if the thread has no such checkpoint."""
    snap = await graph.aget_state(config_of(thread, checkpoint_id))
    if checkpoint_id is not None and snap.created_at is None:
        return None
    return state_view(snap, thread_id)


async def read_history(graph: Graph, thread: str, thread_id: str, limit: int,
                       before: str | None, metadata: dict[str, Any] | None,
                       checkpoint_id: str | None) -> list[dict[str, Any]]:
    """Newest first, from ``checkpoint_id`` (or the latest), older than ``before``."""
    states = graph.aget_state_history(
        config_of(thread, checkpoint_id), filter=metadata or None,
        before=config_of(thread, before) if before else None, limit=limit)
    return [state_view(snap, thread_id) async for snap in states]


async def write_state(graph: Graph, thread: str, thread_id: str, values: Any,
                      as_node: str | None, checkpoint_id: str | None
                      ) -> tuple[dict[str, Any], bool]:
    """A new checkpoint with ``values`` applied as if ``as_node`` wrote them (checked
    first, as a run's input is); its reference, and whether the graph has work left."""
    if values is not None:
        check_values(graph, values, "values")
    if as_node is not None and as_node not in graph.nodes:
        raise OptionError(f"as_node: no node {as_node!r} in the graph")
    try:
        config = await graph.aupdate_state(config_of(thread, checkpoint_id), values,
                                           as_node=as_node)
    except InvalidUpdateError as e:
        raise OptionError(str(e).splitlines()[0]) from e
    pending = bool((await graph.aget_state(config_of(thread))).next)
    return {"checkpoint": checkpoint_ref(config, thread_id)}, pending

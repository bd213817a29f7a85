"""JSON of what a thread shows and a run streams, in LangGraph Server's shapes (pure).

Messages are their pydantic dumps (``type``, ``content``, ``id``, ``tool_calls``...), as
LangGraph Server sends them; an ``Interrupt`` is ``{"value", "id"}``. Thread ids are the
client's: the checkpoint thread id (``<team>/<id>``) is never shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt, StateSnapshot
from pydantic import BaseModel

# client stream_mode -> LangGraph's: "messages" and "messages-tuple" (the SDK's name of
# the pairs) both stream LangGraph's "messages" and differ in their events (messages.py);
# "events" is LangGraph Server's (``astream_events``, see streaming.py)
STREAM_MODES = {"values": "values", "updates": "updates", "messages": "messages",
                "messages-tuple": "messages", "custom": "custom", "debug": "debug",
                "tasks": "tasks", "checkpoints": "checkpoints", "events": "events"}


def jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseMessage):
        return obj.model_dump(mode="json")
    if isinstance(obj, Interrupt):
        return {"value": jsonable(obj.value), "id": obj.id}
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    return str(obj)


def stream_modes(requested: str | list[str] | None) -> list[str]:
    """A request's stream modes as the client named them (default ``values``), sorted;
    unknown ones: ValueError."""
    asked = [requested] if isinstance(requested, str) else list(requested or ["values"])
    bad = [m for m in asked if m not in STREAM_MODES]
    if bad:
        raise ValueError(f"stream_mode {bad} not supported; use {sorted(STREAM_MODES)}")
    return sorted(set(asked))


def with_thread_id(data: Any, checkpoint_thread: str, thread_id: str) -> Any:
    """JSON ``data`` with every value that is the checkpoint thread id (``<team>/<id>``:
    LangGraph puts it in configs, checkpoint configs and run metadata) replaced by the
    client's ``thread_id``, the only thread id the API shows."""
    if isinstance(data, dict):
        return {k: with_thread_id(v, checkpoint_thread, thread_id) for k, v in data.items()}
    if isinstance(data, list):
        return [with_thread_id(v, checkpoint_thread, thread_id) for v in data]
    return thread_id if data == checkpoint_thread else data


def command(body: Mapping[str, Any] | None) -> Command[Any] | None:
    """``{"resume": ..., "update": ..., "goto": ...}`` -> a LangGraph ``Command``."""
    if not body:
        return None
    return Command(resume=body.get("resume"), update=body.get("update"),
                   goto=body.get("goto") or ())


def state_view(snap: StateSnapshot, thread_id: str) -> dict[str, Any]:
    """``GET /threads/{id}/state`` (``thread_id``: the client's, not the checkpoint's)."""
    cfg = snap.config.get("configurable", {}) if snap.config else {}
    parent = (snap.parent_config or {}).get("configurable", {})
    return {"values": jsonable(snap.values or {}), "next": list(snap.next),
            "tasks": [{"id": t.id, "name": t.name, "error": t.error,
                       "interrupts": jsonable(t.interrupts)} for t in snap.tasks],
            "interrupts": jsonable(snap.interrupts),
            "metadata": jsonable(snap.metadata or {}), "created_at": snap.created_at,
            "checkpoint": {"thread_id": thread_id,
                           "checkpoint_ns": cfg.get("checkpoint_ns", ""),
                           "checkpoint_id": cfg.get("checkpoint_id")},
            "checkpoint_id": cfg.get("checkpoint_id"),
            "parent_checkpoint": {"thread_id": thread_id,
                                  "checkpoint_ns": parent.get("checkpoint_ns", ""),
                                  "checkpoint_id": parent.get("checkpoint_id")}
            if parent else None}


def checkpoint_ref(config: RunnableConfig, thread_id: str) -> dict[str, Any]:
    """A checkpoint as LangGraph Server names it (``update_state``'s answer)."""
    cfg = config.get("configurable", {})
    return {"thread_id": thread_id, "checkpoint_ns": cfg.get("checkpoint_ns", ""),
            "checkpoint_id": cfg.get("checkpoint_id")}

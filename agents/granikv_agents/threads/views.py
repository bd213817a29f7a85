"""The JSON of a thread and of a run, as LangGraph Server answers them (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from granikv_agents.threads.store import ThreadRecord, ThreadRun


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def thread_view(t: ThreadRecord, values: dict[str, Any]) -> dict[str, Any]:
    return {"thread_id": t.thread_id, "created_at": iso(t.created_at),
            "updated_at": iso(t.updated_at), "metadata": t.metadata, "status": t.status,
            "values": values, "interrupts": {}}


def run_view(r: ThreadRun) -> dict[str, Any]:
    return {"run_id": r.run_id, "thread_id": r.thread_id, "assistant_id": r.assistant_id,
            "created_at": iso(r.created_at), "updated_at": iso(r.updated_at),
            "status": r.status, "metadata": r.metadata, "kwargs": r.kwargs,
            "multitask_strategy": r.kwargs.get("multitask_strategy", "reject"),
            "error": r.error}


def assistant_view(assistant_id: str, team: str, description: str) -> dict[str, Any]:
    now = iso(0.0)
    return {"assistant_id": assistant_id, "graph_id": assistant_id, "name": assistant_id,
            "description": description, "config": {}, "context": {},
            "metadata": {"team": team}, "version": 1, "created_at": now, "updated_at": now}

"""Run events from LangGraph's ``updates`` stream (pure).

One event per thing a watcher wants to see: the context pinned (and read back at the
end), each finished agent turn, each closed round. A resumed run replays the updates of
the turns that had finished before (marked ``cached``); they are not new events, so
they are skipped: a turn's event is emitted once, when its LLM call returned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

Event = tuple[str, dict[str, Any]]


def update_events(chunk: Mapping[str, Any]) -> Iterator[Event]:
    meta = chunk.get("__metadata__") or {}
    if meta.get("cached"):
        return
    for node, update in chunk.items():
        if node == "__metadata__" or not isinstance(update, Mapping):
            continue
        yield from _node_events(node, update)


def _node_events(node: str, update: Mapping[str, Any]) -> Iterator[Event]:
    if node == "register_context" and "context" in update:
        yield "context", {"when": "start", **update["context"]}
    elif node == "finish" and "context_after" in update:
        yield "context", {"when": "end", **update["context_after"]}
    elif node == "join" and "round" in update:
        yield "round", {"done": int(update["round"]) - 1}
    for turn in update.get("turns") or []:
        yield "turn", dict(turn)

"""Run events from LangGraph's ``updates`` stream (pure).

One event per thing a watcher wants to see: the context pinned (and read back at the
end), each finished agent turn, each closed round. A resumed run replays the updates of
the turns that had finished before (marked ``cached``); they are not new events, so
they are skipped: a turn's event is emitted once, when its LLM call returned.

An executor can die after a turn's write reached the checkpoint and before its event
reached the log. The resumed run does not run that turn again, so nothing would report
it: ``unreported_events`` lists what the checkpoint holds and the log lacks (marked
``recovered``), for the executor to log before it resumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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


def unreported_events(values: Mapping[str, Any],
                      logged: Iterable[Mapping[str, Any]]) -> list[Event]:
    """The events of the run state ``values`` (a checkpoint's, with the saved writes of
    its unfinished superstep applied) that are not in ``logged`` (event views), in the
    order the run would have emitted them: the context pinned, then per round its turns
    and its close, then the context read back at the end."""
    logged = list(logged)
    turns = {_turn_key(e) for e in logged if e.get("type") == "turn"}
    rounds = {e.get("done") for e in logged if e.get("type") == "round"}
    contexts = {e.get("when") for e in logged if e.get("type") == "context"}
    out: list[Event] = []
    if "context" in values and "start" not in contexts:
        out.append(("context", {"when": "start", **values["context"], "recovered": True}))
    closed = int(values.get("round") or 1) - 1  # join moved "round" past each closed one
    state_turns = list(values.get("turns") or [])
    for rnd in sorted({int(t["round"]) for t in state_turns} | set(range(1, closed + 1))):
        out += [("turn", {**t, "recovered": True}) for t in state_turns
                if int(t["round"]) == rnd and _turn_key(t) not in turns]
        if rnd <= closed and rnd not in rounds:
            out.append(("round", {"done": rnd, "recovered": True}))
    if "context_after" in values and "end" not in contexts:
        out.append(("context", {"when": "end", **values["context_after"], "recovered": True}))
    return out


def _turn_key(turn: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return turn.get("agent"), turn.get("round"), turn.get("kind")

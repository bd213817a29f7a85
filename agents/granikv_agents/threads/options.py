"""A run's options, checked against its graph before anything is stored (pure).

A run's input (and a ``command``'s ``update``, and ``update_state``'s values) goes
through the graph's own channels here first: each value is applied to an empty copy of
its channel, with the channel's reducer (``add_messages`` turns message dicts into
messages). What LangGraph would refuse mid-run is refused at submission, so a malformed
message never reaches a checkpoint, where every later read of the thread would fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.channels.base import BaseChannel
from langgraph.pregel import Pregel

from granikv_agents.threads.wire import stream_modes

MultitaskStrategy = Literal["reject", "enqueue", "interrupt"]
MULTITASK: tuple[str, ...] = ("reject", "enqueue", "interrupt")


class OptionError(ValueError):
    """A run option or value the graph or the platform does not take (422)."""


def check_values(graph: Pregel[Any, Any, Any, Any], values: Any, what: str) -> None:
    """Raise ``OptionError`` unless ``values`` would update ``graph``'s state."""
    if not isinstance(values, Mapping):
        raise OptionError(f"{what} must be an object of state keys, not "
                          f"{type(values).__name__}")
    keys = set(graph.stream_channels_list)
    for key, value in values.items():
        if key not in keys:
            raise OptionError(f"{what}: {key!r} is not a state key of the graph "
                              f"(it has {sorted(keys)})")
        spec = graph.channels[key]
        if not isinstance(spec, BaseChannel):  # a managed value: not the client's to set
            raise OptionError(f"{what}: {key!r} is managed by the graph")
        channel = spec.copy()
        try:
            channel.update([value])
        except Exception as e:  # the reducer's own error says what is wrong
            raise OptionError(f"{what}: {key!r} is invalid: "
                              f"{str(e).splitlines()[0]}") from e


def check_nodes(graph: Pregel[Any, Any, Any, Any], nodes: Any, what: str) -> Any:
    """``interrupt_before`` / ``interrupt_after``: ``"*"`` or the graph's node names."""
    if nodes is None or nodes == "*":
        return nodes
    names = sorted(n for n in graph.nodes if not n.startswith("__"))
    unknown = [n for n in nodes if n not in names]
    if unknown:
        raise OptionError(f"{what}: no node {unknown} in the graph (it has {names})")
    return list(nodes)


def multitask(body: Mapping[str, Any]) -> str:
    strategy = body.get("multitask_strategy") or "reject"
    if strategy not in MULTITASK:
        raise OptionError(f"multitask_strategy {strategy!r} is not supported; use one of "
                          f"{list(MULTITASK)}")
    return str(strategy)


def run_kwargs(graph: Pregel[Any, Any, Any, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """What a run stores of its request (``ThreadRun.kwargs``), checked."""
    if body.get("input") is not None:
        check_values(graph, body["input"], "input")
    cmd = body.get("command") or {}
    if cmd.get("update") is not None:
        check_values(graph, cmd["update"], "command.update")
    return {"input": body.get("input"), "command": body.get("command"),
            "stream_mode": stream_modes(body.get("stream_mode")),
            "interrupt_before": check_nodes(graph, body.get("interrupt_before"),
                                            "interrupt_before"),
            "interrupt_after": check_nodes(graph, body.get("interrupt_after"),
                                           "interrupt_after"),
            "checkpoint_id": checkpoint_id(body),
            "multitask_strategy": multitask(body)}


def checkpoint_id(body: Mapping[str, Any]) -> str | None:
    """The checkpoint a run or update starts from: ``checkpoint_id`` or
    ``checkpoint.checkpoint_id`` (None: the thread's latest)."""
    found = body.get("checkpoint_id") or (body.get("checkpoint") or {}).get("checkpoint_id")
    return str(found) if found else None

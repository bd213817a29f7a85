"""A team's graph: its own (``graph: module:function``) or a built-in shape.

A factory returns a ``StateGraph`` (compiled here, with the run's checkpointer) or an
already compiled graph (recompiled onto the checkpointer: its nodes are reused). It is
called with the ``Team`` when it takes an argument, else with none.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from granikv_agents.graph import RetryConfig, build_graph
from granikv_agents.team import Team


class GraphLoadError(ValueError):
    """The factory cannot be imported or does not return a graph."""


def load_factory(ref: str) -> Any:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise GraphLoadError(f"graph {ref!r}: {e}") from e


def team_graph(team: Team, checkpointer: BaseCheckpointSaver[Any] | None = None,
               retry: RetryConfig | None = None) -> Pregel[Any, Any, Any, Any]:
    """The team's compiled graph on ``checkpointer``."""
    if team.graph is None:
        return build_graph(team, retry).compile(checkpointer=checkpointer)
    factory = load_factory(team.graph)
    made = factory(team) if inspect.signature(factory).parameters else factory()
    if isinstance(made, StateGraph):
        return made.compile(checkpointer=checkpointer)
    if isinstance(made, Pregel):
        return made.copy(update={"checkpointer": checkpointer})
    raise GraphLoadError(f"graph {team.graph!r} returned {type(made).__name__}, not a "
                         "StateGraph or a compiled graph")

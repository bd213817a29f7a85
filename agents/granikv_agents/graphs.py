"""A team's graph: its own (``graph: module:function``) or a built-in shape.

On the threads API (``team_graph``), a built-in shape runs as its example written with
the kit (``SHAPE_GRAPHS``: messages in, messages out, roles from the spec's workflow).
The YAML runs API (``/teams/{team}/runs``, ``executor.py``) runs the shape's own graph
(``graph.build_graph``), whose state keeps every turn for its turn events.

A factory returns a ``StateGraph`` (compiled here, with the run's checkpointer) or an
already compiled graph (recompiled onto the checkpointer: its nodes are reused). It is
called with the ``Team`` when it takes an argument, else with none.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from granikv_agents.team import Team

SHAPE_GRAPHS = {"map_reduce": "granikv_agents.examples.review:graph",
                "debate": "granikv_agents.examples.debate:graph",
                "pipeline": "granikv_agents.examples.pipeline:graph"}


# The graph modules a service allows by default: this package's examples, which the
# shipped specs name (deploy/teams/*.yaml).
DEFAULT_GRAPH_MODULES = ("granikv_agents.examples",)


class GraphLoadError(ValueError):
    """The factory cannot be imported or does not return a graph."""


class GraphNotAllowed(GraphLoadError):
    """The factory's module is not among the allowed ones."""


def allowed(ref: str, modules: Sequence[str]) -> bool:
    """Whether ``ref``'s module is one of ``modules`` or inside one of them (a package)."""
    module = ref.partition(":")[0]
    return any(module == m or module.startswith(m + ".") for m in modules)


def resolve(ref: str, modules: Sequence[str]) -> Any:
    """``ref``'s factory, imported only when its module is allowed (``modules``); the
    errors name the reference, not what importing it raised (that may show paths)."""
    if not allowed(ref, modules):
        raise GraphNotAllowed(f"graph {ref!r}: its module is not among the allowed graph "
                              "modules")
    factory = load_factory(ref)
    if not callable(factory):
        raise GraphLoadError(f"graph {ref!r} is not a function")
    return factory


def load_factory(ref: str) -> Any:
    module, _, name = ref.partition(":")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:  # "No module named 'x'"
        raise GraphLoadError(f"graph {ref!r}: {e}") from e
    except ImportError as e:  # its message may name the module's file
        raise GraphLoadError(f"graph {ref!r}: module {module!r} cannot be imported "
                             f"({type(e).__name__})") from e
    if not hasattr(found, name):
        raise GraphLoadError(f"graph {ref!r}: module {module!r} has no {name!r}")
    return getattr(found, name)


def team_graph(team: Team, checkpointer: BaseCheckpointSaver[Any] | None = None
               ) -> Pregel[Any, Any, Any, Any]:
    """The team's compiled graph on ``checkpointer``: its own, or its shape's example."""
    ref = team.graph if team.graph is not None else SHAPE_GRAPHS[team.shape.shape]
    factory = load_factory(ref)
    made = factory(team) if inspect.signature(factory).parameters else factory()
    if isinstance(made, StateGraph):
        return made.compile(checkpointer=checkpointer)
    if isinstance(made, Pregel):
        return made.copy(update={"checkpointer": checkpointer})
    raise GraphLoadError(f"graph {ref!r} returned {type(made).__name__}, not a "
                         "StateGraph or a compiled graph")

"""An assistant's graph and schemas, as LangGraph Server answers ``get_graph`` and
``get_schemas`` (pure).

The run's context schema is ``null``: the platform makes each run's context (the team's
backend and chat model); a client does not send one.
"""

from __future__ import annotations

from typing import Any

from langgraph.pregel import Pregel

from granikv_agents.threads.wire import jsonable


def graph_view(graph: Pregel[Any, Any, Any, Any], xray: int | bool) -> dict[str, Any]:
    """Nodes and edges (``{"nodes": [{"id", "type", "data"}], "edges": [{"source",
    "target", "conditional"?}]}``); ``xray`` also draws subgraphs, to that depth."""
    return dict(jsonable(graph.get_graph(xray=xray).to_json()))


def schemas_view(assistant_id: str, graph: Pregel[Any, Any, Any, Any]) -> dict[str, Any]:
    return {"graph_id": assistant_id, "input_schema": graph.get_input_jsonschema(),
            "output_schema": graph.get_output_jsonschema(),
            "state_schema": graph.get_output_jsonschema(),
            "config_schema": None, "context_schema": None}

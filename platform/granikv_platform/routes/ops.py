"""Operations: /metrics (Prometheus), /v1/granikv/stats (the same, as JSON), /teams,
/healthz (liveness), /readyz (readiness).

/metrics and /v1/granikv/stats need the operator key: they show every team's prefix ids
and traffic. /teams needs any key; /healthz and /readyz none (probes). /healthz answers
while the replica runs; /readyz answers 503 until an LLM replica has reported (started,
reconciled with the registry), so a load balancer sends no traffic before one can serve.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from granikv_platform import metrics
from granikv_platform.config import PlatformConfig
from granikv_platform.deps import Authenticated, CurrentIngress, Operator
from granikv_platform.errors import error_response
from granikv_platform.protocol import error_item


def router(cfg: PlatformConfig) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get("/metrics", response_class=Response, dependencies=[Operator])
    async def prometheus(ing: CurrentIngress) -> Response:
        return Response(metrics.render(await ing.reports(), [t.name for t in cfg.teams]),
                        media_type=metrics.CONTENT_TYPE)

    @r.get("/v1/granikv/stats", dependencies=[Operator])
    async def stats(ing: CurrentIngress) -> dict[str, Any]:
        """Latest report of each live replica: engine (HOT/COLD, hits, dispatcher) and
        front end (queue depth, tokens/s)."""
        return {"model": cfg.model.model_id, "replicas": await ing.reports()}

    @r.get("/teams", dependencies=[Authenticated])
    async def teams() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"team": t.name, "description": t.description, "base_url": f"/teams/{t.name}/v1"}
            for t in cfg.teams]}

    @r.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.get("/readyz", response_model=None)
    async def readyz(ing: CurrentIngress) -> Response | dict[str, Any]:
        live = await ing.reports()
        if not live:
            return error_response(error_item(503, "no LLM replica has reported yet"))
        return {"status": "ready", "replicas": len(live)}

    return r

"""LangGraph Server's routes under ``/teams/{team}`` (``langgraph-sdk``'s client with
``url=<platform>/teams/<team>`` drives them; the API key goes as ``x-api-key``).

    POST /assistants/search, GET /assistants/{id}       the team's spec files
    GET  /assistants/{id}/graph | /schemas               its graph, its state's schemas
    POST /threads, POST /threads/search
    GET | PATCH | DELETE /threads/{id}, POST /threads/{id}/copy
    GET  /threads/{id}/state[/{checkpoint}], POST /threads/{id}/state/checkpoint
    POST /threads/{id}/state | /history                  update the state | its history
    POST /threads/{id}/runs                             a background run
    POST /threads/{id}/runs/stream | /runs/wait         create and stream | wait
    GET  /threads/{id}/runs?limit=&offset=, GET /threads/{id}/runs/{run}
    GET  /threads/{id}/runs/{run}/join | /stream        wait | stream (Last-Event-ID)
    POST /threads/{id}/runs/{run}/cancel
    POST /runs/wait | /runs/stream                      stateless runs: refused (422)

They forward to the run service (``ThreadApi`` in ``service.RunService``) through its
Serve handle, as ``rest.py``'s routes do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from starlette.responses import Response

from granikv_agents.service_handle import service
from granikv_agents.threads.schemas import (
    CheckpointQuery,
    HistoryQuery,
    Page,
    RunCreate,
    StateUpdate,
    ThreadCreate,
    ThreadPatch,
)
from granikv_platform.answers import answer, stream_answer
from granikv_platform.database import MAX_ROWS
from granikv_platform.deps import CurrentIngress
from granikv_platform.protocol import ErrorItem, Item, JsonItem, error_item

# The SDK's runs.wait / runs.stream with no thread (its stateless runs): every run here
# belongs to a thread, whose checkpoints hold its state.
STATELESS = ("stateless runs (no thread) are not supported: create a thread first "
             "(POST /threads) and run on it (POST /threads/{thread_id}/runs/wait or "
             "/runs/stream)")


def threads_router(team: str) -> APIRouter:
    r = APIRouter(tags=[f"team {team}: threads (LangGraph Server API)"])

    async def call(ing: Any, op: str, **args: Any) -> Response:
        return answer(await service(ing).threads.remote(team, op, args))

    async def stream(ing: Any, tid: str, rid: str, after: int) -> Response:
        return await stream_answer(
            service(ing).options(stream=True).thread_events.remote(team, tid, rid, after),
            headers={"Location": f"/threads/{tid}/runs/{rid}/stream"})

    @r.post("/assistants/search")
    async def search_assistants(ing: CurrentIngress, body: Page | None = None) -> Response:
        b = body or Page.model_validate({})
        return await call(ing, "search_assistants", limit=b.limit, offset=b.offset)

    @r.get("/assistants/{assistant_id}")
    async def get_assistant(assistant_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "get_assistant", assistant_id=assistant_id)

    @r.get("/assistants/{assistant_id}/graph")
    async def assistant_graph(assistant_id: str, ing: CurrentIngress,
                              xray: Annotated[str, Query(max_length=8)] = "false"
                              ) -> Response:
        depth: int | bool = int(xray) if xray.isdigit() else xray.lower() == "true"
        return await call(ing, "assistant_graph", assistant_id=assistant_id, xray=depth)

    @r.get("/assistants/{assistant_id}/schemas")
    async def assistant_schemas(assistant_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "assistant_schemas", assistant_id=assistant_id)

    @r.post("/threads")
    async def create_thread(ing: CurrentIngress, body: ThreadCreate | None = None) -> Response:
        b = body or ThreadCreate.model_validate({})
        return await call(ing, "create_thread", thread_id=b.thread_id, metadata=b.metadata,
                          if_exists=b.if_exists or "raise")

    @r.post("/threads/search")
    async def search_threads(ing: CurrentIngress, body: Page | None = None) -> Response:
        b = body or Page.model_validate({})
        return await call(ing, "search_threads", limit=b.limit, offset=b.offset)

    @r.get("/threads/{thread_id}")
    async def get_thread(thread_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "get_thread", thread_id=thread_id)

    @r.patch("/threads/{thread_id}")
    async def update_thread(thread_id: str, body: ThreadPatch, ing: CurrentIngress
                            ) -> Response:
        return await call(ing, "update_thread", thread_id=thread_id, metadata=body.metadata)

    @r.delete("/threads/{thread_id}")
    async def delete_thread(thread_id: str, ing: CurrentIngress) -> Response:
        item: Item = await service(ing).threads.remote(team, "delete_thread",
                                                       {"thread_id": thread_id})
        return answer(item) if isinstance(item, ErrorItem) else Response(status_code=204)

    @r.post("/threads/{thread_id}/copy")
    async def copy_thread(thread_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "copy_thread", thread_id=thread_id)

    @r.get("/threads/{thread_id}/state")
    async def state(thread_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "state", thread_id=thread_id)

    @r.get("/threads/{thread_id}/state/{checkpoint_id}")
    async def state_at(thread_id: str, checkpoint_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "state", thread_id=thread_id, checkpoint_id=checkpoint_id)

    @r.post("/threads/{thread_id}/state/checkpoint")
    async def state_at_checkpoint(thread_id: str, body: CheckpointQuery,
                                  ing: CurrentIngress) -> Response:
        return await call(ing, "state", thread_id=thread_id,
                          checkpoint_id=body.checkpoint.checkpoint_id)

    @r.post("/threads/{thread_id}/state")
    async def update_state(thread_id: str, body: StateUpdate, ing: CurrentIngress
                           ) -> Response:
        return await call(ing, "update_state", thread_id=thread_id, values=body.values,
                          as_node=body.as_node, checkpoint_id=body.at())

    @r.post("/threads/{thread_id}/history")
    async def history(thread_id: str, ing: CurrentIngress,
                      body: HistoryQuery | None = None) -> Response:
        b = body or HistoryQuery.model_validate({})
        at = b.checkpoint.checkpoint_id if b.checkpoint else None
        return await call(ing, "history", thread_id=thread_id, limit=b.limit,
                          before=b.before_id(), metadata=b.metadata, checkpoint_id=at)

    @r.post("/threads/{thread_id}/runs")
    async def create_run(thread_id: str, body: RunCreate, ing: CurrentIngress) -> Response:
        return await call(ing, "create_run", thread_id=thread_id, body=body.wire())

    @r.post("/threads/{thread_id}/runs/stream")
    async def create_and_stream(thread_id: str, body: RunCreate, ing: CurrentIngress) -> Response:
        item: Item = await service(ing).threads.remote(
            team, "create_run", {"thread_id": thread_id, "body": body.wire()})
        if not isinstance(item, JsonItem):
            return answer(item)
        return await stream(ing, thread_id, item.body["run_id"], 0)

    @r.post("/threads/{thread_id}/runs/wait")
    async def create_and_wait(thread_id: str, body: RunCreate, ing: CurrentIngress) -> Response:
        item: Item = await service(ing).threads.remote(
            team, "create_run", {"thread_id": thread_id, "body": body.wire()})
        if not isinstance(item, JsonItem):
            return answer(item)
        return await call(ing, "join", thread_id=thread_id, run_id=item.body["run_id"])

    @r.get("/threads/{thread_id}/runs")
    async def list_runs(thread_id: str, ing: CurrentIngress,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 10,
                        offset: Annotated[int, Query(ge=0, le=MAX_ROWS)] = 0,
                        status: Literal["pending", "running", "success", "error",
                                        "timeout", "interrupted"] | None = None) -> Response:
        return await call(ing, "list_runs", thread_id=thread_id, limit=limit, offset=offset,
                          status=status)

    @r.get("/threads/{thread_id}/runs/{run_id}")
    async def get_run(thread_id: str, run_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "get_run", thread_id=thread_id, run_id=run_id)

    @r.get("/threads/{thread_id}/runs/{run_id}/join")
    async def join(thread_id: str, run_id: str, ing: CurrentIngress) -> Response:
        return await call(ing, "join", thread_id=thread_id, run_id=run_id)

    @r.get("/threads/{thread_id}/runs/{run_id}/stream")
    async def join_stream(thread_id: str, run_id: str, ing: CurrentIngress,
                          last_event_id: Annotated[str | None, Header()] = None) -> Response:
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
        return await stream(ing, thread_id, run_id, after)

    @r.post("/threads/{thread_id}/runs/{run_id}/cancel")
    async def cancel(thread_id: str, run_id: str, ing: CurrentIngress,
                     wait: Annotated[int, Query(ge=0, le=1)] = 0) -> Response:
        item: Item = await service(ing).threads.remote(
            team, "cancel", {"thread_id": thread_id, "run_id": run_id, "wait": bool(wait)})
        return answer(item) if isinstance(item, ErrorItem) else Response(status_code=204)

    @r.post("/runs/wait")
    @r.post("/runs/stream")
    async def stateless_run() -> Response:  # else 405: GET /runs/{run_id} (rest.py)
        return answer(error_item(422, STATELESS))

    return r


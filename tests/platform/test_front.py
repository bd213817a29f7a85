"""What Serve's front says by itself, in the platform's shape (``front.ServeAnswers``, the
middleware Serve's proxy puts around its HTTP app), and how long a request waits for an
LLM replica (``routing.ReplicaRouter``). Each answer here is one Serve's proxy gives
(Ray 2.60: ``http_util.convert_object_to_asgi_messages`` for its own errors, nothing more
after a replica is lost mid-stream); the middleware runs over a stand-in for the proxy's
app, which sends those messages. The Serve app's own runs are in tests/reliability
(test_engine_outage, test_replica_kill)."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections.abc import Callable
from typing import Any

import pytest
from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
from ray.serve._private.http_util import convert_object_to_asgi_messages, retry_after_headers
from ray.serve.exceptions import BackPressureError
from ray.serve.request_router import PendingRequest

from granikv_platform.front import LOST, ServeAnswers, proxy_middlewares
from granikv_platform.routing import NoReplica, ReplicaRouter

Message = dict[str, Any]
RID = [(b"x-request-id", b"req-1")]


def run(messages: list[Message]) -> list[Message]:
    """What ServeAnswers sends for an app (the proxy) that sends ``messages``."""
    sent: list[Message] = []

    async def app(scope: Any, receive: Any, send: Callable[[Message], Any]) -> None:
        for m in messages:
            await send(m)

    async def send(m: Message) -> None:
        sent.append(m)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(ServeAnswers(app)({"type": "http", "headers": RID}, receive, send))
    return sent


def serve_error(text: str, status: int, headers: list[tuple[bytes, bytes]] | None = None
                ) -> list[Message]:
    """A text answer as Serve's proxy makes it (with the request id its own middleware
    adds)."""
    msgs = convert_object_to_asgi_messages(text, status_code=status,
                                           extra_headers=headers)
    msgs[0]["headers"] = [tuple(h) for h in msgs[0]["headers"]] + RID
    return msgs


def body(sent: list[Message]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def header(start: Message, name: bytes) -> list[bytes]:
    return [v for k, v in start["headers"] if k.lower() == name]


def test_serves_proxy_callback_returns_the_middleware() -> None:
    (mw,) = proxy_middlewares()
    assert mw.cls is ServeAnswers


def test_a_full_queue_is_openai_shaped_with_its_retry_after() -> None:
    e = BackPressureError(num_queued_requests=4, max_queued_requests=4, status_code=503,
                          retry_after_s=2)
    sent = run(serve_error(e.message, 503, retry_after_headers(e.retry_after_s)))
    start = sent[0]
    assert start["status"] == 503 and header(start, b"content-type") == [b"application/json"]
    assert header(start, b"retry-after") == [b"2"]
    assert int(header(start, b"content-length")[0]) == len(body(sent))
    err = json.loads(body(sent))["error"]
    assert err == {"message": e.message, "type": "ServiceUnavailableError", "code": 503,
                   "request_id": "req-1"}
    assert not sent[-1].get("more_body")


def test_no_replica_in_time_says_so_and_when_to_retry() -> None:
    e = NoReplica(10.0)
    sent = run(serve_error(e.message, 503))  # no Retry-After from Serve: one is added
    assert header(sent[0], b"retry-after") == [b"1"]
    assert json.loads(body(sent))["error"]["message"].startswith(
        "no LLM replica took the request within 10 s")


def test_a_text_500_of_serves_is_a_503_not_a_500() -> None:
    ray_text = "ActorDiedError: The actor died unexpectedly... pid=123, ip=10.0.0.7"
    sent = run(serve_error(ray_text, 500))
    assert sent[0]["status"] == 503 and header(sent[0], b"retry-after") == [b"1"]
    err = json.loads(body(sent))["error"]
    assert err["message"] == LOST and "10.0.0.7" not in body(sent).decode()


def test_a_replica_lost_before_any_answer_is_a_503_with_the_request_id() -> None:
    sent = run([])  # Serve's proxy sends nothing for a replica that died (Ray 2.60)
    start = sent[0]
    assert start["status"] == 503 and header(start, b"retry-after") == [b"1"]
    assert header(start, b"x-request-id") == [b"req-1"]
    assert json.loads(body(sent))["error"] == {
        "message": LOST, "type": "ServiceUnavailableError", "code": 503,
        "request_id": "req-1"}


@pytest.mark.parametrize(("status", "kind"), [(404, "NotFoundError"),
                                              (408, "RequestTimeoutError"),
                                              (429, "RateLimitError")])
def test_serves_other_text_answers_are_openai_shaped(status: int, kind: str) -> None:
    sent = run(serve_error("some text", status))
    assert sent[0]["status"] == status and not header(sent[0], b"retry-after")
    assert json.loads(body(sent))["error"] == {"message": "some text", "type": kind,
                                               "code": status, "request_id": "req-1"}


def sse_start(status: int = 200) -> Message:
    return {"type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), *RID]}


def chunk(text: str, more: bool = True) -> Message:
    return {"type": "http.response.body", "body": text.encode(), "more_body": more}


def test_a_stream_cut_by_a_lost_replica_ends_with_an_error_event_and_done() -> None:
    sent = run([sse_start(), chunk('data: {"x": 1}\n\n')])
    events = [e for e in body(sent).decode().split("\n\n") if e]
    assert events[0] == 'data: {"x": 1}'
    err = json.loads(events[1].removeprefix("data: "))["error"]
    assert err == {"message": LOST, "type": "ServiceUnavailableError", "code": 503,
                   "request_id": "req-1"}
    assert events[2] == "data: [DONE]" and sent[-1]["more_body"] is False


def test_the_apps_own_answers_pass_as_they_are() -> None:
    ended = [sse_start(), chunk("data: a\n\n"), chunk("data: [DONE]\n\n", more=False)]
    assert run(ended) == ended
    err = {"type": "http.response.start", "status": 503,
           "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]}
    app_error = [err, chunk('{"error": {}}', more=False)]
    assert run(app_error) == app_error
    cut_json = [{"type": "http.response.start", "status": 200,
                 "headers": [(b"content-type", b"application/json")]}, chunk("{")]
    assert run(cut_json) == cut_json  # a cut JSON answer is not made to look whole


def request(created_at: float | None = None) -> PendingRequest:
    pr = PendingRequest(args=[], kwargs={},
                        metadata=RequestMetadata(request_id="r", internal_request_id="i"))
    if created_at is not None:
        pr.created_at = created_at
    return pr


def router(wait_s: float) -> ReplicaRouter:
    r = ReplicaRouter(deployment_id=DeploymentID(name="d-llm", app_name="d"),
                      handle_source=DeploymentHandleSource.PROXY)
    r.initialize_state(replica_wait_s=wait_s, retry_after_s=2.0)
    return r


def test_a_request_no_replica_takes_in_time_is_turned_away() -> None:
    async def main() -> tuple[float, PendingRequest, ReplicaRouter]:
        r, pr = router(0.3), request()
        t0 = time.monotonic()
        with pytest.raises(NoReplica) as e:
            await r._choose_replica_for_request(pr)
        assert e.value.status_code == 503 and e.value.retry_after_s == 2.0
        return time.monotonic() - t0, pr, r

    took, pr, _ = asyncio.run(main())
    assert 0.25 < took < 2.0, took
    assert pr.future.cancelled()  # Serve's routing passes over it (as a cancelled call)


def test_a_retried_request_keeps_its_first_wait() -> None:
    async def main() -> float:
        t0 = time.monotonic()
        with pytest.raises(NoReplica):  # waited 5 s on its first try already
            await router(3.0)._choose_replica_for_request(request(time.time() - 5),
                                                          is_retry=True)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 0.5


def test_no_replica_crosses_processes_as_itself() -> None:
    e = pickle.loads(pickle.dumps(NoReplica(7.5, 3.0)))
    assert isinstance(e, BackPressureError) and e.retry_after_s == 3.0
    assert e.message.startswith("no LLM replica took the request within 7.5 s")

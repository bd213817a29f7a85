"""What the app answers before its replica's engine is involved (FastAPI's TestClient on
the real app of a config): request ids on every answer and error body, the OpenAPI
document for the operator only, a keys file emptied on reload refused; and the
sanitizing of the errors that cross to clients (vLLM's stream errors, Ray's internals
in a failed run's error)."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from vllm.entrypoints.serve.utils.error_response import create_error_response

from granikv_platform.answers import answer, public_sse
from granikv_platform.app import create_app
from granikv_platform.auth import OPERATOR, Authenticator, new_key, write_keys_file
from granikv_platform.config import PlatformConfig
from granikv_platform.errors import REQUEST_ID, client_error
from granikv_platform.protocol import JsonItem, error_item, public_text

RED, ADMIN = new_key(), new_key()
# The text of a RayActorError as Ray 2.60 writes it (an LLM replica killed under a run).
RAY_ERROR = (
    "TransientLLMError: ActorDiedError: The actor died unexpectedly before finishing "
    "this task.\n\tclass_name: ServeReplica:granikv:granikv-llm\n\tactor_id: "
    "4f6d1b0e3a2c9d8e7f6a5b4c01000000\n\tpid: 48213\n\tname: "
    "SERVE_REPLICA::granikv#granikv-llm#x1\n\tnamespace: serve\n\tip: 10.42.0.17\n"
    "The actor is dead because its worker process has died.")
# A filesystem path in a text (/srv/x/, /tmp/ray/session_latest/logs/serve/).
A_PATH = re.compile(r"/[\w.-]+/")
TASK_ERROR = ("RayTaskError(ValueError): ray::ServeReplica:granikv:granikv-llm."
              "handle_request_streaming() (pid=48213, ip=10.42.0.17, actor_id=4f6d1b0e)")


def app_client(tmp_path: Path) -> tuple[TestClient, Path]:
    keys = tmp_path / "keys"
    write_keys_file(keys, [("red", RED), (OPERATOR, ADMIN)])
    cfg = PlatformConfig.model_validate({
        "model": {"model_id": "tiny", "source": "deploy/models/tiny-llama"},
        "engine": {"accelerator": "cpu"}, "teams": [{"name": "red"}, {"name": "secret-team"}],
        "auth": {"mode": "keys", "keys_file": str(keys)}})
    return TestClient(create_app(cfg), raise_server_exceptions=False), keys


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_openapi_document_needs_the_operator_key(tmp_path: Path) -> None:
    c, _ = app_client(tmp_path)
    for path in ("/openapi.json", "/docs"):
        anonymous = c.get(path)
        assert anonymous.status_code == 401, (path, anonymous.text)
        assert "secret-team" not in anonymous.text
        team = c.get(path, headers=bearer(RED))
        assert team.status_code == 403 and "secret-team" not in team.text, path
    doc = c.get("/openapi.json", headers=bearer(ADMIN))
    assert doc.status_code == 200 and "/teams/secret-team/context" in doc.json()["paths"]
    assert "swagger" in c.get("/docs", headers=bearer(ADMIN)).text.lower()


def test_every_answer_and_error_body_has_a_request_id(tmp_path: Path) -> None:
    c, _ = app_client(tmp_path)
    made = c.get("/v1/prefixes")  # no key: the gate's 401
    rid = made.headers["x-request-id"]
    assert made.status_code == 401 and made.json()["error"]["request_id"] == rid
    assert len(rid) >= 16
    assert c.get("/healthz").headers["x-request-id"] not in ("", rid)
    given = c.get("/no/such/route", headers={**bearer(RED), "x-request-id": "client-id.42"})
    assert given.status_code == 404 and given.json()["error"]["request_id"] == "client-id.42"
    odd = c.get("/v1/prefixes", headers={"x-request-id": "bad id\r\nwith spaces"})
    assert odd.json()["error"]["request_id"] != "bad id\r\nwith spaces"


def test_a_500_names_its_request_and_no_path() -> None:
    """A 500's body names the request id its cause is logged under; no server path (its
    cause's, nor where the logs are)."""
    token = REQUEST_ID.set("rid-500")
    try:
        status, body = client_error(error_item(500, "Traceback: /srv/secret/engine.py"))
    finally:
        REQUEST_ID.reset(token)
    msg = body["error"]["message"]
    assert status == 500 and body["error"]["request_id"] == "rid-500"
    assert "request id rid-500" in msg and not A_PATH.search(msg), msg


def test_an_unhandled_error_names_its_request(tmp_path: Path) -> None:
    """Starlette runs the handler of an unhandled exception outside every middleware
    (``ServerErrorMiddleware``): the 500's body and log line still name the request."""
    c, _ = app_client(tmp_path)

    async def boom() -> None:
        raise RuntimeError("/srv/secret/store.py: database is locked")

    c.app.add_api_route("/v1/boom", boom)  # type: ignore[attr-defined]
    for given in ({}, {"x-request-id": "client-id.500"}):
        r = c.get("/v1/boom", headers={**bearer(RED), **given})
        rid = r.headers["x-request-id"]
        err = r.json()["error"]
        assert r.status_code == 500 and rid == given.get("x-request-id", rid)
        assert err["request_id"] == rid and f"request id {rid}" in err["message"]
        assert not A_PATH.search(r.text), r.text


def test_an_emptied_keys_file_keeps_the_previous_keys(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Emptied, or cut down to the operator's key alone (every team locked out): the
    replica keeps the keys it had, and says so in its log at error level."""
    c, keys = app_client(tmp_path)
    auth: Authenticator = c.app.state.granikv_auth  # type: ignore[attr-defined]
    auth.reload_s = 0.0
    assert c.get("/teams", headers=bearer(RED)).status_code == 200
    for emptied in ("", "# every key removed\n\n", f"{OPERATOR}: {ADMIN}\n"):
        keys.write_text(emptied)
        os.utime(keys, ns=(1, 10**18 + len(emptied)))  # a new mtime each time
        with caplog.at_level(logging.ERROR, logger="ray.serve"):
            caplog.clear()
            assert c.get("/teams", headers=bearer(RED)).status_code == 200, repr(emptied)
        assert any(r.levelno == logging.ERROR and "REFUSED" in r.getMessage()
                   for r in caplog.records), (repr(emptied), caplog.text)
    assert c.get("/teams", headers=bearer(ADMIN)).status_code == 200
    rotated = new_key()
    write_keys_file(keys, [("red", rotated)])
    os.utime(keys, ns=(1, 3 * 10**18))
    assert c.get("/teams", headers=bearer(rotated)).status_code == 200  # reloads again
    assert c.get("/teams", headers=bearer(RED)).status_code == 401


def test_ray_internals_never_reach_a_client() -> None:
    for text in (RAY_ERROR, TASK_ERROR):
        clean = public_text(text)
        for detail in ("48213", "10.42.0.17", "4f6d1b0e", "actor_id", "SERVE_REPLICA"):
            assert detail not in clean, (detail, clean)
        assert "server log" in clean
    assert public_text(RAY_ERROR).startswith("TransientLLMError: ActorDiedError: The actor "
                                             "died unexpectedly")
    assert public_text("a team 'red' run failed: 2 + 2") == "a team 'red' run failed: 2 + 2"
    run = {"run_id": "run-1", "status": "failed", "error": RAY_ERROR, "task": "ip: 10.0.0.1"}
    body = json.loads(bytes(answer(JsonItem(run)).body))
    assert "48213" not in body["error"] and body["task"] == "ip: 10.0.0.1"
    data = json.dumps({"status": "failed", "error": RAY_ERROR})
    event = f"id: 7\nevent: status\ndata: {data}\n\n"
    out = public_sse(event)
    assert out.startswith("id: 7\nevent: status\ndata: ") and "10.42.0.17" not in out
    assert json.loads(out.split("data: ")[1])["status"] == "failed"


@pytest.mark.vllm
def test_vllms_inline_stream_error_is_sanitized() -> None:
    """vLLM's stream generators yield ``data: {error}`` with the exception's text when a
    request fails mid-stream (a dead engine core: a 500)."""
    err = create_error_response(RuntimeError("EngineCore died: /srv/models/x pid=99"))
    chunk = f"data: {json.dumps(err.model_dump())}\n\n"
    token = REQUEST_ID.set("rid-stream")
    try:
        out = public_sse('data: {"choices": []}\n\n' + chunk + "data: [DONE]\n\n")
    finally:
        REQUEST_ID.reset(token)
    assert out.startswith('data: {"choices": []}\n\n') and out.endswith("data: [DONE]\n\n")
    event = json.loads(out.split("\n\n")[1][6:])["error"]
    assert event["code"] == 500 and event["request_id"] == "rid-stream"
    assert "rid-stream" in event["message"] and not A_PATH.search(event["message"]), event


def test_a_replicas_503_says_when_to_retry() -> None:
    """A replica answers 503 itself when its engine died (``LLMReplica._dead``)."""
    from granikv_platform.engine_watch import DEAD_ENGINE

    r = answer(error_item(503, DEAD_ENGINE))
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert json.loads(bytes(r.body))["error"]["message"] == DEAD_ENGINE
    assert "retry-after" not in answer(error_item(409, "taken")).headers

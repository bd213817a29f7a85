"""Over HTTP (the suite's app): a POST to a path no route serves is 404, whatever its
body or content type (the body checks of ``body.py`` apply to routes that exist: a known
route with another content type stays 415); and a body refused for its Content-Length
(413) names the request's id, as the response's header does and as every error body."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.conftest import LIMITS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


def _names_its_request(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == status and error["message"], error
    assert error.get("request_id") == r.headers["x-request-id"], (error, r.headers)
    return error


@pytest.mark.parametrize("path", ["/v1/nope", "/teams/red/v1/nope", "/nope/at/all"])
@pytest.mark.parametrize("ctype", ["text/plain", "application/json", None])
def test_a_post_to_an_unknown_route_is_404(client: Callable[[str | None], httpx.Client],
                                           path: str, ctype: str | None) -> None:
    headers = {"content-type": ctype} if ctype else {}
    r = client("red").post(path, content=b'{"a": 1}', headers=headers)
    assert _names_its_request(r, 404)["type"] == "NotFoundError"


def test_a_known_route_still_refuses_another_content_type(
        client: Callable[[str | None], httpx.Client]) -> None:
    r = client("red").post("/v1/chat/completions", content=b'{"a": 1}',
                           headers={"content-type": "text/plain"})
    error = _names_its_request(r, 415)
    assert "application/json" in error["message"]
    assert error["type"] == "UnsupportedMediaTypeError"
    r = client("red").post("/v1/models", content=b"x", headers={"content-type": "text/plain"})
    _names_its_request(r, 405)  # a known path, another method: as with a JSON body


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_413_names_its_request(client: Callable[[str | None], httpx.Client],
                                 chunked: bool) -> None:
    body = b'{"prompt": "' + b"x" * LIMITS["max_body_bytes"] + b'"}'
    content = iter([body[:1000], body[1000:]]) if chunked else body
    r = client("red").post("/v1/completions", content=content,
                           headers={"content-type": "application/json", "x-request-id": "big-1"})
    assert "limits.max_body_bytes" in _names_its_request(r, 413)["message"]
    assert r.headers["x-request-id"] == "big-1"

"""Serve's queue limit passed through the config (``replicas.deployment``): a replica
that has ``max_ongoing_requests`` running and ``max_queued_requests`` waiting turns the
next request away, and the client gets a 503 with Retry-After, not a wait or a 500.

Its own small app on the session's cluster (one CPU replica, no agents): the only way to
see Serve's admission control act on a real replica. About one engine start-up."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.platform.conftest import API_KEYS, app_args

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
NAME = "gkvbp"


@pytest.fixture(scope="module")
def queue_app(ray_serve: int, base_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[str]:
    from ray import serve

    from granikv_platform.builder import build_app

    args = app_args(tmp_path_factory.mktemp("bp"))
    args.update(name=NAME, team_routers=[], services=[],
                teams=[t for t in args["teams"] if t["name"] == "red"])
    args["registry"]["name"] = f"{NAME}-registry-{os.getpid()}"
    args["replicas"].update(num_replicas=1, num_cpus=0.2, max_ongoing_requests=1,
                            deployment={"max_queued_requests": 1})
    serve.run(build_app(args), name=NAME, route_prefix=f"/{NAME}")
    yield f"{base_url}/{NAME}"
    serve.delete(NAME)


def test_a_full_queue_is_a_503_with_retry_after(queue_app: str) -> None:
    body = {"model": "tiny-llama", "prompt": "a", "max_tokens": 60, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {API_KEYS['red']}"}

    def post(_: int) -> httpx.Response:
        return httpx.post(f"{queue_app}/v1/completions", json=body, headers=headers,
                          timeout=300)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(post, range(6)))
    codes = sorted(r.status_code for r in answers)
    assert codes.count(200) >= 2 and 503 in codes and set(codes) <= {200, 503}, codes
    full = next(r for r in answers if r.status_code == 503)
    assert "retry-after" in full.headers and full.json()["error"]["code"] == 503, (
        dict(full.headers), full.text)

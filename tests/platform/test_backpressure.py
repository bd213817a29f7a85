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
    """One request runs (its stream has started: the replica's one slot is taken), then
    five arrive at once: the first of them waits in the queue and is served, the others
    are turned away with a 503 and Retry-After. (Sent all at once, two requests can both
    count as queued before the first reaches the replica, so how many of a single burst
    are accepted depends on timing.)"""
    body = {"model": "tiny-llama", "prompt": "a", "max_tokens": 60, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {API_KEYS['red']}"}

    def post(_: int) -> httpx.Response:
        return httpx.post(f"{queue_app}/v1/completions", json=body, headers=headers,
                          timeout=300)

    running = {**body, "max_tokens": 64, "stream": True}  # the limit: the longest
    with httpx.stream("POST", f"{queue_app}/v1/completions", json=running, headers=headers,
                      timeout=300) as holder:
        assert holder.status_code == 200, holder.read()
        lines = holder.iter_lines()
        assert next(ln for ln in lines if ln.startswith("data: ")) != "data: [DONE]"
        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(post, range(5)))
        assert [ln for ln in lines if ln.startswith("data: ")][-1] == "data: [DONE]"
    codes = sorted(r.status_code for r in answers)
    assert 200 in codes and 503 in codes and set(codes) <= {200, 503}, codes
    full = next(r for r in answers if r.status_code == 503)
    assert "retry-after" in full.headers and full.json()["error"]["code"] == 503, (
        dict(full.headers), full.text)

"""Tool-bearing team chats keep the team's context in HOT, in the prompt formats of
Llama 3.1 (tools add "Environment: ipython" before the context) and Qwen2.5 (tools
follow the context in its block): ``ChatOpenAI.bind_tools`` through /teams/{team}/v1
gets its tool call parsed by vLLM's parser for the family, the response says ``hit``,
the HOT counters move, and the prefix it read is a variant of the context that goes
when the context is replaced. One app per family (tiny model, random weights: the call
is forced by a structured-output choice), beside the session's app."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import API_KEYS, app_args, auth, fresh_stats, stats, wait_until
from tests.platform.template_models import FAMILIES, Family, make_model

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
TEAM = "green"
CONTEXT = "The team reviews the code of the platform. " * 20 + "Answer briefly."
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def family_app(request: pytest.FixtureRequest, ray_serve: int,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Family]]:
    from ray import serve

    from granikv_platform.builder import build_app

    family: Family = request.param
    tmp = tmp_path_factory.mktemp(family.name)
    name = "gkv-" + family.name.replace(".", "")
    args = app_args(tmp)
    args.update(name=name, team_routers=[], services=[],
                model={"model_id": family.name, "source": str(make_model(family, tmp / "m"))},
                frontend={"enable_auto_tool_choice": True, "tool_call_parser": family.parser},
                registry={"name": f"{name}-registry-{os.getpid()}",
                          "state_path": str(tmp / "registry.json")})
    args["replicas"].update(num_replicas=1, num_cpus=0.1)
    serve.run(build_app(args), name=name, route_prefix=f"/{name}")
    url = f"http://127.0.0.1:{ray_serve}/{name}"
    wait_until(lambda: len(stats(url)["replicas"]) == 1, 120, f"{name}'s replica")
    yield url, family
    serve.delete(name)


def request_path(url: str, after: dict[str, Any]) -> dict[str, Any]:
    (report,) = fresh_stats(url, after)["replicas"].values()
    return report  # type: ignore[no-any-return]


def test_tool_calls_of_a_team_read_its_context_from_hot(family_app: tuple[str, Family]) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    url, family = family_app
    team = httpx.Client(base_url=url, headers=auth(TEAM), timeout=120)
    put = team.put(f"/teams/{TEAM}/context", json={"text": CONTEXT})
    assert put.status_code == 200, put.text
    context_id, context_len = put.json()["prefix_id"], put.json()["length"]
    before = stats(url)
    (rep0,) = before["replicas"].values()

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    llm = ChatOpenAI(base_url=f"{url}/teams/{TEAM}/v1", api_key=API_KEYS[TEAM],  # type: ignore[arg-type]
                     model=family.name, temperature=0, max_tokens=64, max_retries=0,
                     extra_body={"structured_outputs": {"choice": [family.call]}})
    msg = llm.bind_tools([get_weather]).invoke("Weather in Paris?")
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})], msg

    body = {"model": family.name, "messages": [{"role": "user", "content": "Paris?"}],
            "tools": [WEATHER], "tool_choice": "auto", "max_tokens": 4}
    r = team.post(f"/teams/{TEAM}/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["x-granikv-prefix"] == "hit"
    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= context_len - 16, (cached, context_len)  # the context, from HOT

    plain = team.post(f"/teams/{TEAM}/v1/chat/completions", json={
        "model": family.name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert plain.status_code == 200 and plain.headers["x-granikv-prefix"] == "hit"

    rep = request_path(url, stats(url))  # a report made after the requests ended
    g0, g1 = rep0["granikv"]["hits"], rep["granikv"]["hits"]
    # the second tool chat and the plain one; the first registered the variant, which
    # may still have been filling when it ran
    assert g1["hits"] - g0["hits"] >= 2, (g0, g1)
    path0, path1 = rep0["request_path"], rep["request_path"]
    assert path1["context_variants"] - path0["context_variants"] == 2, path1
    assert path1["context_rendered"] == path0["context_rendered"]

    prefixes = team.get("/v1/prefixes").json()["data"]
    (variant,) = [p for p in prefixes if p["kind"] == "variant"]
    assert variant["prefix_id"].startswith(context_id + ":") and variant["state"] == "ready"
    assert variant["length"] > context_len - 16
    # a new context: the variant goes with the old one
    assert team.put(f"/teams/{TEAM}/context", json={"text": CONTEXT + " Twice."}).status_code == 200
    kinds = [p["kind"] for p in team.get("/v1/prefixes").json()["data"]]
    assert "variant" not in kinds, kinds
    assert json.dumps(prefixes)  # the listing is plain JSON

"""What a client of ``vllm serve`` expects from the app's OpenAI surface, on the session
app (deploy/local.yaml: tool calling on, with vLLM's hermes parser): tools with
``tool_choice: "auto"``, vLLM's own max_tokens default, /v1/models/{id}, /tokenize and
/detokenize, a team's completions, and the readiness probe."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.platform.conftest import API_KEYS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
MODEL = "tiny-llama"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
# The tiny model's weights are random: a structured-output choice makes it write the
# call in hermes's format, so that vLLM's parser has a call to find.
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_tools_with_auto_choice_are_parsed_into_tool_calls(base_url: str) -> None:
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{base_url}/v1", api_key=API_KEYS["red"], max_retries=0)
    forced = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], tool_choice="auto", max_tokens=64, temperature=0,  # type: ignore[list-item]
        extra_body={"structured_outputs": {"choice": [CALL]}})
    (call,) = forced.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert forced.choices[0].finish_reason == "tool_calls"
    free = sdk.chat.completions.create(  # whatever the model says: 200, not 400
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="auto", max_tokens=4)
    assert free.choices[0].message.role == "assistant"


def test_streamed_tool_calls_arrive_as_deltas(client: Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER], "tool_choice": "auto", "max_tokens": 64, "stream": True,
            "temperature": 0, "structured_outputs": {"choice": [CALL]}}
    with client("red").stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    deltas = [c["delta"] for ln in lines[:-1] for c in json.loads(ln)["choices"]]
    names = [t["function"].get("name") for d in deltas for t in d.get("tool_calls") or []]
    assert "get_weather" in names, deltas


def test_a_body_that_breaks_vllms_validator_is_a_422(client: Client) -> None:
    """An assistant message whose tool_calls is a number: vLLM's own request model raises
    TypeError on it (``vllm serve`` answers 500); here it is an invalid body, on the
    OpenAI route and on a team's."""
    body = {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "assistant", "content": "x", "tool_calls": 5}]}
    for path in ("/v1/chat/completions", "/teams/red/v1/chat/completions"):
        r = client("red").post(path, json=body)
        assert r.status_code == 422, (path, r.status_code, r.text)
        assert "invalid request body" in r.json()["error"]["message"], r.text


def test_a_request_without_max_tokens_gets_vllms_default(client: Client) -> None:
    """No max_tokens: vLLM's default, as from ``vllm serve`` (a chat: what fits in
    max_model_len after the prompt; a completion: OpenAI's 16), not limits.max_tokens
    (64 in the session app), which only caps what a request asks for."""
    red = client("red")
    long = [{"role": "user", "content": "ab " * 850}]  # about 1,700 tokens
    chat = red.post("/v1/chat/completions", json={"model": MODEL, "messages": long,
                                                  "ignore_eos": True})
    assert chat.status_code == 200, chat.text
    usage = chat.json()["usage"]
    assert usage["completion_tokens"] == 2048 - usage["prompt_tokens"] > 64, usage
    done = red.post("/v1/completions", json={"model": MODEL, "prompt": "a",
                                             "ignore_eos": True})
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 16


def test_models_show_the_id_and_one_model_by_id(client: Client) -> None:
    red = client("red")
    card = red.get("/v1/models").json()["data"][0]
    assert card["id"] == card["root"] == MODEL  # not the server's model folder
    for path in (f"/v1/models/{MODEL}", f"/teams/red/v1/models/{MODEL}"):
        one = red.get(path)
        assert one.status_code == 200 and one.json()["id"] == MODEL, one.text
    missing = red.get("/v1/models/gpt-9")
    assert missing.status_code == 404 and "gpt-9" in missing.json()["error"]["message"]
    assert client(None).get(f"/v1/models/{MODEL}").status_code == 401


def test_tokenize_and_detokenize_round_trip(client: Client) -> None:
    red = client("red")
    tok = red.post("/tokenize", json={"model": MODEL, "prompt": "hello world"})
    assert tok.status_code == 200, tok.text
    ids = tok.json()["tokens"]
    assert tok.json()["count"] == len(ids) > 1
    back = red.post("/detokenize", json={"model": MODEL, "tokens": ids})
    assert back.status_code == 200 and back.json()["prompt"].endswith("hello world"), back.text
    chat = red.post("/tokenize", json={"model": MODEL, "messages": [
        {"role": "user", "content": "hello world"}]})
    assert chat.status_code == 200 and chat.json()["count"] > len(ids)  # the template's
    done = red.post("/v1/completions", json={"model": MODEL, "prompt": "hello world",
                                             "max_tokens": 1})
    assert done.json()["usage"]["prompt_tokens"] == len(ids)  # what the engine counts
    bad = red.post("/tokenize", json={"model": "gpt-9", "prompt": "x"})
    assert bad.status_code == 404, bad.text
    assert red.post("/detokenize", json={"tokens": "x"}).status_code == 422


def test_team_completions_are_scoped_to_the_team(client: Client) -> None:
    body = {"model": MODEL, "prompt": "Once upon", "max_tokens": 3, "temperature": 0}
    r = client("red").post("/teams/red/v1/completions", json=body)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
    assert client("blue").post("/teams/red/v1/completions", json=body).status_code == 403
    other = {**body, "vllm_xargs": {"granikv_team": "blue"}}
    assert client("red").post("/teams/red/v1/completions", json=other).status_code == 403


def test_readiness_and_liveness(base_url: str) -> None:
    ready = httpx.get(f"{base_url}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["replicas"] >= 1, ready.text
    assert httpx.get(f"{base_url}/healthz", timeout=30).json() == {"status": "ok"}

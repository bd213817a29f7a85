"""The Responses API as a drop-in: the official ``openai`` SDK's ``client.responses``
against the suite's Serve app (two CPU replicas, tests/conftest.py), unmodified: JSON
and streamed answers, a forced function tool and its output sent back, follow-ups with
``previous_response_id`` from the platform's store (scoped by team, ``store: false``
kept out of it), a team's route reading the team's context from HOT, and the 4xx of
what the platform does not serve. The restart test (test_serve_replicas.py) continues
a response stored before a replica was replaced, on the new replica
(``stored_before_restart`` / ``continued_on``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from granikv_platform.names import REPLICA_HEADER
from tests.platform.conftest import API_KEYS, counters, fresh_stats, stats

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
MODEL = "tiny-llama"
# Random weights: tokens until max_output_tokens, so every answer has text.
GREEDY: dict[str, Any] = {"temperature": 0, "max_output_tokens": 8,
                          "extra_body": {"ignore_eos": True}}
# A forced call is written in hermes's format under vLLM's structural tag. The random
# weights would write the city, or JSON whitespace, until max_output_tokens: the enum
# fixes the city, and a bias against the whitespace tokens (tab, newline, carriage
# return, space: ids 205, 206, 209, 228) leaves the grammar one way to go on.
NO_WHITESPACE = {"205": -100, "206": -100, "209": -100, "228": -100}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "required": ["city"], "properties": {
               "city": {"type": "string", "enum": ["Paris"]}}}}


def sdk(base_url: str, team: str, root: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}{root}", api_key=API_KEYS[team],
                         max_retries=0, timeout=120)


def test_a_response_and_its_stream_carry_the_same_kind_of_answer(base_url: str) -> None:
    red = sdk(base_url, "red")
    r = red.responses.create(model=MODEL, input="Say hello.", **GREEDY)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL
    assert r.status == "incomplete" and r.output_text  # cut by max_output_tokens
    assert r.usage is not None and r.usage.input_tokens > 0 and r.usage.output_tokens == 8

    events = list(red.responses.create(model=MODEL, input="Say hello.", stream=True, **GREEDY))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = events[-1].response  # type: ignore[union-attr]
    assert deltas and "".join(deltas) == done.output_text == r.output_text  # greedy
    assert done.id == events[0].response.id  # type: ignore[union-attr]
    assert red.responses.retrieve(done.id).output_text == done.output_text  # stored


def test_usage_of_responses_is_counted_for_the_team(base_url: str) -> None:
    gold = sdk(base_url, "gold")
    before = fresh_stats(base_url, stats(base_url))
    r = gold.responses.create(model=MODEL, input="count me", **GREEDY)
    streamed = list(gold.responses.create(model=MODEL, input="me too", stream=True, **GREEDY))
    usage = streamed[-1].response.usage  # type: ignore[union-attr]
    assert r.usage is not None and usage is not None

    def team_total(s: dict[str, Any], key: str) -> int:
        return sum(rep["teams"].get("gold", {}).get(key, 0) for rep in s["replicas"].values())

    after = fresh_stats(base_url, stats(base_url))  # reports made after both ended
    assert team_total(after, "requests") - team_total(before, "requests") == 2
    assert (team_total(after, "prompt_tokens") - team_total(before, "prompt_tokens")
            == r.usage.input_tokens + usage.input_tokens)
    assert team_total(after, "generation_tokens") - team_total(before, "generation_tokens") == 16


def test_a_forced_function_call_and_its_output_continue_the_conversation(
        base_url: str) -> None:
    red = sdk(base_url, "red")
    first = red.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 temperature=0, max_output_tokens=64,
                                 extra_body={"logit_bias": NO_WHITESPACE})
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", first.output
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    # the call's output, sent back as the next turn's input
    second = red.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER], temperature=0,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "sunny"}], **{k: v for k, v in GREEDY.items() if k != "temperature"})
    assert second.previous_response_id == first.id and second.output_text
    assert first.usage is not None and second.usage is not None
    # the first turn's input was in the prompt (this template writes no tool calls)
    assert second.usage.input_tokens > first.usage.input_tokens


def test_follow_ups_read_the_teams_own_stored_responses(base_url: str) -> None:
    red, blue = sdk(base_url, "red"), sdk(base_url, "blue")
    first = red.responses.create(model=MODEL, input="Remember the number 7.", **GREEDY)
    assert red.responses.retrieve(first.id).id == first.id
    follow = red.responses.create(model=MODEL, input="Which number?",
                                  previous_response_id=first.id, **GREEDY)
    assert follow.previous_response_id == first.id
    assert first.usage is not None and follow.usage is not None
    assert follow.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    alone = red.responses.create(model=MODEL, input="Which number?", **GREEDY)
    assert alone.usage is not None and alone.usage.input_tokens < follow.usage.input_tokens

    # another team's id is as unknown as no id at all
    for call in (lambda: blue.responses.retrieve(first.id),
                 lambda: blue.responses.create(model=MODEL, input="hi",
                                               previous_response_id=first.id, **GREEDY),
                 lambda: blue.responses.delete(first.id)):
        with pytest.raises(openai.NotFoundError, match=f"Response with id '{first.id}' not"):
            call()
    assert red.responses.retrieve(first.id).id == first.id  # blue deleted nothing

    red.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        red.responses.retrieve(first.id)


def test_store_false_is_not_kept(base_url: str) -> None:
    red = sdk(base_url, "red")
    r = red.responses.create(model=MODEL, input="forget me", store=False, **GREEDY)
    assert r.model_extra is not None and r.model_extra.get("store") is False
    with pytest.raises(openai.NotFoundError):
        red.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        red.responses.create(model=MODEL, input="and?", previous_response_id=r.id, **GREEDY)


def test_the_team_route_reads_the_teams_context_from_hot(client: Client,
                                                         base_url: str) -> None:
    """As a team chat: the context's tokens head the prompt (the same prompt and greedy
    answer as /v1 with the context's text first), the request is bound to the
    context's HOT prefix, and the caller's instructions follow the context."""
    ctx = client("blue").get("/teams/blue/context").json()
    assert ctx["state"] == "ready", ctx
    team, plain = sdk(base_url, "blue", "/teams/blue/v1"), sdk(base_url, "blue")
    hits = _hits(base_url, ctx["prefix_id"], stats(base_url))
    for instructions in (None, "Answer in French."):
        raw = team.responses.with_raw_response.create(
            model=MODEL, input="status?", instructions=instructions, **GREEDY)
        assert raw.headers["x-granikv-prefix"] == "hit"
        t = raw.parse()
        assert t.instructions == instructions
        head = [{"role": "system", "content": ctx["text"]}]
        if instructions:
            head.append({"role": "system", "content": instructions})
        p = plain.responses.create(model=MODEL, input=[*head, {"role": "user",
                                                                "content": "status?"}],
                                   **GREEDY)
        assert t.usage is not None and p.usage is not None
        assert t.usage.input_tokens == p.usage.input_tokens > ctx["length"]
        assert t.output_text == p.output_text
    streamed = team.responses.with_raw_response.create(model=MODEL, input="go", stream=True,
                                                       **GREEDY)
    assert streamed.headers["x-granikv-prefix"] == "hit"
    assert list(streamed.parse())[-1].type == "response.completed"
    # every team request read the context's HOT prefix
    now = _hits(base_url, ctx["prefix_id"], stats(base_url))
    assert now >= hits + 3, (hits, now, {r: (rep["prefix_hits"], counters(rep)) for r, rep
                                         in stats(base_url)["replicas"].items()})


def _hits(url: str, pid: str, after: dict[str, Any]) -> int:
    s = fresh_stats(url, after)
    return sum(r["prefix_hits"].get(pid, {}).get("hits", 0) for r in s["replicas"].values())


def test_what_is_not_served_says_so(client: Client, base_url: str) -> None:
    red = sdk(base_url, "red")
    for c in (red, sdk(base_url, "red", "/teams/red/v1")):
        with pytest.raises(openai.NotFoundError, match="does not serve embeddings"):
            c.embeddings.create(model=MODEL, input="hi")
    r = red.responses.create(model=MODEL, input="hi", **GREEDY)
    with pytest.raises(openai.BadRequestError, match="only background responses"):
        red.responses.cancel(r.id)
    with pytest.raises(openai.BadRequestError, match="input_items is not supported"):
        red.responses.input_items.list(r.id)
    with pytest.raises(openai.BadRequestError, match="background responses are not supported"):
        red.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.BadRequestError, match=r"limits\.max_tokens"):
        red.responses.create(model=MODEL, input="hi", max_output_tokens=10_000)
    with pytest.raises(openai.BadRequestError, match="'configuration_update' are not supp"):
        red.responses.create(model=MODEL, input=[{"type": "configuration_update"}])
    # a field sent as null takes its default (vLLM's response model refused a null
    # background in the middle of the stream)
    nulls = client("red").post("/teams/red/v1/responses", json={
        "model": MODEL, "input": "", "stream": True, "background": None, "store": None,
        "tools": None, "max_output_tokens": 4})
    assert nulls.status_code == 200 and "event: response.completed" in nulls.text, nulls.text
    assert "event: error" not in nulls.text, nulls.text
    bad = client("red").post("/v1/responses", json={"model": MODEL, "input": 5})
    assert bad.status_code == 422 and "input" in bad.json()["error"]["message"], bad.text


# ---- used by test_serve_replicas.py's restart test ---------------------------------
def stored_before_restart(base_url: str) -> tuple[str, int]:
    """A stored red response, and its conversation's length in tokens."""
    r = sdk(base_url, "red").responses.create(model=MODEL, input="Before the restart.",
                                              **GREEDY)
    assert r.usage is not None
    return r.id, r.usage.input_tokens + r.usage.output_tokens


def continued_on(base_url: str, replica: str, stored: tuple[str, int]) -> None:
    """Continue ``stored`` until ``replica`` (one started after it was stored) serves
    the follow-up: it reads the conversation from the database, not from a process."""
    red = sdk(base_url, "red")
    for _ in range(20):
        raw = red.responses.with_raw_response.create(
            model=MODEL, input="After it.", previous_response_id=stored[0], **GREEDY)
        r = raw.parse()
        assert r.previous_response_id == stored[0] and r.usage is not None
        assert r.usage.input_tokens > stored[1]
        if raw.headers[REPLICA_HEADER] == replica:
            return
    raise AssertionError(f"replica {replica} served none of 20 follow-ups")

"""The Responses API's stored responses (``store``, ``previous_response_id``), kept in the
platform's database (``ResponseStore``) instead of vLLM's process.

vLLM keeps a stored response in a dict of the process that answered it (and only with
``VLLM_ENABLE_RESPONSES_API_STORE``): a follow-up then continues only on that replica,
and only until it restarts. Here the engine gets every request whole: the earlier
conversation (loaded for the caller's team) followed by the request's input, with
``store`` false and no ``previous_response_id``. The answer still shows both as the
client sent them (and its ``instructions``, which a team's route moves into the
input). A response is stored unless ``store`` is false, with its conversation: the
earlier items, this input and the response's output items, which vLLM takes back as
input. It is saved before its answer (or its ``response.completed`` event) leaves, so a
follow-up sent at once finds it.

A stored response is the team's: another team's id reads as unknown (404), as OpenAI
answers an id it does not have. ``background`` (and so ``cancel``) and
``input_items`` are refused with a 400 that names them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from granikv_platform.identity import ANONYMOUS
from granikv_platform.protocol import ErrorItem, Item, JsonItem, SseItem, error_item
from granikv_platform.response_store import ResponseStore

logger = logging.getLogger("ray.serve")

Serve = Callable[[dict[str, Any]], AsyncIterator[Item]]
# The events whose ``response`` object is shown to the client, the last one final.
_SHOWN = ("response.created", "response.in_progress", "response.completed",
          "response.incomplete", "response.failed")
_FINAL = ("response.completed", "response.incomplete")
NOT_STORED = "the response was generated but could not be stored"


def team_of(body: dict[str, Any]) -> str:
    """The team a bound body (``identity.bind_body``) is scoped to."""
    xargs = body.get("vllm_xargs")
    return str(xargs.get("granikv_team") or ANONYMOUS) if isinstance(xargs, dict) \
        else ANONYMOUS


def not_found(response_id: str) -> ErrorItem:
    return error_item(404, f"Response with id '{response_id}' not found.")


def as_items(given: Any) -> Any:
    """A request's ``input`` as a list of items (a string is one user message); any
    other value as it is, for vLLM's validation to refuse."""
    return [{"role": "user", "content": given}] if isinstance(given, str) else given


def replayable(output: list[Any]) -> list[Any]:
    """A response's output items as input of a follow-up: vLLM reads an assistant
    message's first content part, so a message without any is left out."""
    return [o for o in output if not (isinstance(o, dict) and o.get("type") == "message"
                                      and not o.get("content"))]


class StoredResponses:
    """``create`` serves a request and stores its response; ``answer`` reads one."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def create(self, team: str, body: dict[str, Any], serve: Serve) -> AsyncIterator[Item]:
        """``serve``: the engine's answer to a body (limits, team share and binding
        applied: ``LLMReplica._serve``)."""
        if body.get("background"):
            yield error_item(400, "background responses are not supported by this "
                             "platform: send the request without `background` (stream "
                             "it to see it progress)")
            return
        prev = body.get("previous_response_id")
        earlier: list[Any] = []
        if isinstance(prev, str):
            found = await self.store.conversation(team, prev)
            if found is None:
                yield not_found(prev)
                return
            earlier = found
        given = as_items(body.get("input"))
        request = {k: v for k, v in body.items() if k != "previous_response_id"}
        if isinstance(given, list):
            request["input"] = [*earlier, *given]
        request["store"] = False  # vLLM keeps nothing
        keep = body.get("store") is not False
        turn = _Turn(self.store, team, keep, [*earlier, *given] if isinstance(given, list)
                     else earlier, {"previous_response_id": prev, "store": keep,
                                    "instructions": body.get("instructions")})
        async for item in serve(request):
            yield await turn.shown(item)

    async def answer(self, op: str, team: str, response_id: str) -> Item:
        """``get``, ``delete`` or ``cancel`` of a stored response of ``team``."""
        if op == "get":
            got = await self.store.get(team, response_id)
            return not_found(response_id) if got is None else JsonItem(got)
        if op == "delete":
            if not await self.store.delete(team, response_id):
                return not_found(response_id)
            return JsonItem({"id": response_id, "object": "response", "deleted": True})
        if op == "cancel":
            if await self.store.get(team, response_id) is None:
                return not_found(response_id)
            return error_item(400, f"Response with id '{response_id}' cannot be "
                              "cancelled: only background responses can be, and this "
                              "platform does not run them")
        raise ValueError(f"not a stored-response operation: {op!r}")

    async def close(self) -> None:
        await self.store.close()


@dataclasses.dataclass
class _Turn:
    """One request's answer on its way out: its response objects shown with what the
    client sent, and its final response stored with ``items`` (the conversation before
    its output)."""

    store: ResponseStore
    team: str
    keep: bool
    items: list[Any]
    sent: dict[str, Any]

    async def shown(self, item: Item) -> Item:
        if isinstance(item, JsonItem) and isinstance(item.body, dict) \
                and item.body.get("object") == "response":
            response = {**item.body, **self.sent}
            if not await self._saved(response):
                return error_item(500, NOT_STORED)
            return dataclasses.replace(item, body=response)
        if isinstance(item, SseItem) and item.text.startswith("event: response."):
            return await self._event(item)
        return item

    async def _event(self, item: SseItem) -> SseItem:
        kind, _, data = item.text.partition("\ndata: ")
        kind = kind.removeprefix("event: ")
        if kind not in _SHOWN:
            return item
        event = json.loads(data)
        event["response"] = {**event["response"], **self.sent}
        if kind in _FINAL and not await self._saved(event["response"]):
            return dataclasses.replace(item, text="event: error\ndata: " + json.dumps(
                {"error": {"message": NOT_STORED, "type": "InternalServerError",
                           "code": 500}}) + "\n\n")
        return dataclasses.replace(
            item, text=f"event: {kind}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n")

    async def _saved(self, response: dict[str, Any]) -> bool:
        """Whether ``response`` is stored (or was not to be)."""
        if not self.keep:
            return True
        try:
            await self.store.save(self.team, response,
                                  [*self.items, *replayable(response.get("output") or [])])
        except Exception:
            logger.exception("response %s of team %s not stored", response.get("id"),
                             self.team)
            return False
        return True

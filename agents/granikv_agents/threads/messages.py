"""LangGraph Server's ``messages`` stream mode: whole messages so far, not chunks (pure).

LangGraph's ``messages`` mode yields ``(message chunk, metadata)`` pairs; the SDK's
``messages-tuple`` sends those as they are, under the event name ``messages``. For
``messages``, LangGraph Server (langgraph-api's ``stream.astream_state``) instead keeps
each message id's chunks added up and sends, per pair:

- ``messages/metadata`` ``{id: {"metadata": metadata}}``, once, before the id's first
  message;
- ``messages/partial`` ``[message]`` when the pair's message is a chunk (a token), the
  message so far (its chunks added up, as a message: ``type`` ``ai``, not
  ``AIMessageChunk``);
- ``messages/complete`` ``[message]`` when it is a whole message (a model call that did
  not stream, a tool's message).

Clients written for LangGraph Server (assistant-ui's LangGraph runtime,
``langgraph-sdk`` users) read these. LangGraph Server sends them under these names from
subgraphs too (no ``|namespace`` suffix).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.messages import BaseMessage, BaseMessageChunk, message_chunk_to_message


class MessageEvents:
    """One run's ``messages`` mode: ``(event, data)`` pairs per ``(message, metadata)``."""

    def __init__(self) -> None:
        self.sofar: dict[str | None, BaseMessage] = {}  # message id -> its chunks added up

    def events(self, message: BaseMessage, metadata: dict[str, Any]
               ) -> Iterator[tuple[str, Any]]:
        seen = self.sofar.get(message.id)
        if seen is None:
            yield "messages/metadata", {message.id: {"metadata": metadata}}
        if isinstance(seen, BaseMessageChunk) and isinstance(message, BaseMessageChunk):
            self.sofar[message.id] = seen + message
        else:  # a first message, or a whole one that replaces what its id had
            self.sofar[message.id] = message
        event = ("messages/partial" if isinstance(message, BaseMessageChunk)
                 else "messages/complete")
        yield event, [message_chunk_to_message(self.sofar[message.id])]

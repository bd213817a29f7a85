"""How an OpenAI event stream ended: a finish, an error event, or neither.

vLLM's serving code ends a stream with ``data: [DONE]``. A request that fails in the
engine after its first chunk may end with no ``finish_reason`` and no error event; the
client (the OpenAI SDK) then sees an empty answer as a success. ``StreamEnd`` watches
the events as they pass and says, at ``[DONE]``, whether an error event must go before
it. Pure text checks, no JSON parsing per chunk: in an event's JSON a quote inside a
string is escaped, so an unescaped ``"finish_reason": "`` or ``{"error":`` is a key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = "data: [DONE]"
_FINISHED = re.compile(r'(?<!\\)"finish_reason":\s*"')
_ERROR = re.compile(r'^data: \{"error":', re.MULTILINE)


@dataclass
class StreamEnd:
    """Fed every SSE text of one stream, in order."""

    finished: bool = False
    errored: bool = False
    done: bool = False

    def see(self, text: str) -> None:
        if not self.finished and _FINISHED.search(text):
            self.finished = True
        if not self.errored and _ERROR.search(text):
            self.errored = True
        if DONE in text:
            self.done = True

    @property
    def abnormal(self) -> bool:
        """Whether the stream carried neither a finish nor an error event."""
        return not self.finished and not self.errored


def error_event(message: str, status: int = 500, type_: str = "InternalServerError") -> str:
    """An OpenAI-shaped error event, as vLLM's serving code sends one mid-stream."""
    return "data: " + json.dumps({"error": {"message": message, "type": type_,
                                            "code": status}}) + "\n\n"


def before_done(text: str, event: str) -> str:
    """``text`` with ``event`` put before its ``data: [DONE]`` event."""
    i = text.find(DONE)
    return text[:i] + event + text[i:] if i >= 0 else text + event

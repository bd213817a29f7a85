"""How an OpenAI event stream ended: a finish, an error event, or neither.

vLLM's serving code ends a stream with ``data: [DONE]``. A request that fails in the
engine after its first chunk may end with no ``finish_reason`` and no error event; the
client (the OpenAI SDK) then sees an empty answer as a success. ``StreamEnd`` watches
the events as they pass and says, at ``[DONE]``, whether an error event must go before
it. Pure text checks, no JSON parsing per chunk: in an event's JSON a quote inside a
string is escaped, so an unescaped ``"finish_reason": "`` or ``{"error":`` is a key. A
substring test comes first (every chunk passes here, and a regular expression over it
cost several microseconds, more than the rest of the chunk's path in the replica).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = "data: [DONE]"
_FINISH_KEY = '"finish_reason":'
_FINISHED = re.compile(r'(?<!\\)"finish_reason":\s*"')
_ERROR = re.compile(r'^data: \{"error":', re.MULTILINE)
_ERROR_EVENT = re.compile(r'^data: \{"error":.*$', re.MULTILINE)  # the whole line


@dataclass
class StreamEnd:
    """Fed every SSE text of one stream, in order."""

    finished: bool = False
    errored: bool = False
    done: bool = False

    def see(self, text: str) -> None:
        if not self.finished and _FINISH_KEY in text and _finished(text):
            self.finished = True
        if not self.errored and '{"error":' in text and _ERROR.search(text):
            self.errored = True
        if DONE in text:
            self.done = True

    @property
    def abnormal(self) -> bool:
        """Whether the stream carried neither a finish nor an error event."""
        return not self.finished and not self.errored


def _finished(text: str) -> bool:
    """Whether a ``finish_reason`` key in ``text`` has a string value (not ``null``)."""
    i = text.find(_FINISH_KEY)
    while i >= 0:
        j = i + len(_FINISH_KEY)
        if text.startswith(("null", " null"), j):  # vLLM's every unfinished chunk
            i = text.find(_FINISH_KEY, j)
            continue
        return _FINISHED.search(text, i - 1 if i else 0) is not None
    return False


def error_event(message: str, status: int = 500, type_: str = "InternalServerError") -> str:
    """An OpenAI-shaped error event, as vLLM's serving code sends one mid-stream."""
    return "data: " + json.dumps({"error": {"message": message, "type": type_,
                                            "code": status}}) + "\n\n"


def replace_errors(text: str, event: str) -> str:
    """``text`` with each of its error events replaced by ``event`` (an
    ``error_event``)."""
    line = event.strip()
    return _ERROR_EVENT.sub(lambda _: line, text)


def before_done(text: str, event: str) -> str:
    """``text`` with ``event`` put before its ``data: [DONE]`` event."""
    i = text.find(DONE)
    return text[:i] + event + text[i:] if i >= 0 else text + event

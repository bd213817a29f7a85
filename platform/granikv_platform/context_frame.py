"""Where a team's context sits in a rendered chat, as tokens: pure functions, no engine.

A chat template frames a lone system message as ``head + content + tail`` (for
Llama 3.1: the system header and the knowledge-date lines before, ``<|eot_id|>`` after;
for Qwen2.5: ``<|im_start|>system\\n`` before, ``<|im_end|>\\n`` after). A team chat is
rendered with a short placeholder as its system message; the placeholder's content
tokens are then replaced by the context's. What comes before the context in a
conversation may differ from the lone message's head: with tools, Llama 3.1's template
adds ``Environment: ipython`` before it, and Qwen2.5's template puts the tools between
the context and ``<|im_end|>``. ``splice`` reports the head the conversation actually
has, so that the caller binds the request to a HOT prefix that ends with the context
(``head + context``), which any continuation keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Tokens = tuple[int, ...]


@dataclass(frozen=True)
class Frame:
    """The tokens a template puts before (``head``) and after (``tail``) the content of
    a lone system message."""

    head: Tokens
    tail: Tokens

    def content(self, rendered: Sequence[int]) -> Tokens | None:
        """The content tokens of a lone system message rendered in this frame; None when
        ``rendered`` is not ``head + content + tail`` with some content."""
        h, t = len(self.head), len(self.tail)
        if (len(rendered) <= h + t or tuple(rendered[:h]) != self.head
                or tuple(rendered[len(rendered) - t:]) != self.tail):
            return None
        return tuple(rendered[h:len(rendered) - t])


def frame_of(one: Sequence[int], other: Sequence[int]) -> Frame:
    """The frame of two renders of lone system messages whose contents share neither
    their first nor their last token: the common head and the common tail."""
    n = min(len(one), len(other))
    h = 0
    while h < n and one[h] == other[h]:
        h += 1
    t = 0
    while t < n - h and one[len(one) - 1 - t] == other[len(other) - 1 - t]:
        t += 1
    return Frame(tuple(one[:h]), tuple(one[len(one) - t:]))


@dataclass(frozen=True)
class Spliced:
    """A prompt with the context in place of the placeholder; ``head`` is what precedes
    the context in it."""

    prompt: list[int]
    head: Tokens
    after: int = 0  # where the prompt goes on after the context

    def framed_as(self, frame: Frame) -> bool:
        """Whether the context sits in ``frame`` here (its lone message's head before
        it, its tail after it): the prompt then starts with the context's own prefix.
        Costs the frame's length, not the context's."""
        end = self.after + len(frame.tail)
        return self.head == frame.head and tuple(self.prompt[self.after:end]) == frame.tail

    def starts_with(self, prefix: Sequence[int]) -> bool:
        return len(self.prompt) >= len(prefix) and tuple(self.prompt[:len(prefix)]) == tuple(prefix)


def splice(prompt: Sequence[int], placeholder: Sequence[int],
           context: Sequence[int]) -> Spliced | None:
    """``prompt`` with its first occurrence of ``placeholder`` (the placeholder
    message's content tokens) replaced by ``context``; None when it does not occur."""
    n = len(placeholder)
    if n == 0:
        return None
    first = placeholder[0]
    for i in range(len(prompt) - n + 1):
        if prompt[i] == first and tuple(prompt[i:i + n]) == tuple(placeholder):
            return Spliced([*prompt[:i], *context, *prompt[i + n:]], tuple(prompt[:i]),
                            i + len(context))
    return None

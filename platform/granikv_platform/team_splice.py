"""A team chat's context spliced into its rendered prompt as tokens, and the binding of
the request to the context's HOT prefix (or a variant of it): ``EngineHost.team_chat``
renders a placeholder where the context goes, and ``splice_context`` replaces its tokens
by the context's, rendered once when it was set."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.openai.engine.protocol import ErrorResponse

from granikv_platform.context_frame import Frame, Spliced, splice

# A team chat's context goes through the chat template as this short system message;
# its content tokens are then replaced by the context's own (rendered once, when the
# context was set). See ``splice_context``. The second one only serves to find the
# template's frame (context_frame.py): it shares neither end with the first.
CONTEXT_PLACEHOLDER = "granikv team context"
FRAME_PROBE = "other words here"


@dataclass
class SpliceCounters:
    """Team chats whose context was spliced as tokens, those of them bound to a variant
    of the context's prefix (the template put something else before the context, or
    after it, in the same block: tools), and those that needed the full render."""

    spliced: int = 0
    variants: int = 0
    rendered: int = 0


# Binds a team chat whose prompt starts with ``head + context`` but not with the
# context's own prefix: returns the id of a HOT prefix of those tokens (registered on
# first use) and its state in the engine ("ready" once in HOT). See
# ``LLMReplica.team_chat``.
VariantBinder = Callable[[tuple[int, ...]], Awaitable[tuple[str, str]]]


@dataclass
class ContextSplice:
    """One team chat's: the placeholder's content tokens, the context's (``content``,
    None when the context was rendered in another frame) and its prefix (``tokens``:
    the lone system message), how to bind a variant, and what became of it:
    ``outcome`` is the ``x-granikv-prefix`` header's value (``hit`` when the prompt
    starts with a HOT prefix of the context, ``miss; reason=...`` when not)."""

    placeholder: tuple[int, ...]
    content: tuple[int, ...] | None
    tokens: Sequence[int]
    text: str
    counters: SpliceCounters
    variant: VariantBinder | None = None
    outcome: str = "miss; reason=not-rendered"
    frame: Frame | None = None  # the frame ``tokens`` was rendered in (a cheaper check)

    async def bind(self, request: Any, done: list[Spliced]) -> None:
        """Set ``outcome``; bind ``request`` to a variant when its prompt starts with the
        context but not with the context's prefix."""
        frame = self.frame
        if all(d.framed_as(frame) if frame is not None else d.starts_with(self.tokens)
               for d in done):
            self.outcome = "hit"
            return
        heads = {d.head for d in done}
        if self.variant is None or self.content is None or len(heads) != 1:
            self.outcome = "miss; reason=prompt-mismatch"
            return
        xargs = request.vllm_xargs if isinstance(request.vllm_xargs, dict) else {}
        try:
            xargs["granikv_prefix_id"], state = await self.variant(
                (*heads.pop(), *self.content))
        except Exception as e:  # no room in HOT, say: served from paged KV, unbound
            xargs.pop("granikv_prefix_id", None)
            self.outcome = f"miss; reason=variant-not-registered ({type(e).__name__})"
            return
        self.counters.variants += 1
        # registered just now, the variant may still be filling: not read from HOT yet
        self.outcome = "hit" if state == "ready" else f"miss; reason=not-in-hot (state {state})"

    async def into(self, request: Any, inputs: list[Any]) -> bool:
        """Put the context's tokens in place of the placeholder's in each rendered
        input (``prompt_token_ids``) and bind ``request``; False, with nothing changed,
        when the placeholder is not in one of them (a template that rewrites the system
        message, or another frame): the request is then rendered again with the
        context's text, and ``judge`` tells the outcome."""
        content = self.content
        done = [None if content is None else
                splice(inp.get("prompt_token_ids", ()), self.placeholder, content)
                for inp in inputs]
        spliced = [d for d in done if d is not None]
        if len(spliced) != len(done):
            self.counters.rendered += 1
            return False
        for inp, d in zip(inputs, spliced):
            inp["prompt_token_ids"] = d.prompt
        self.counters.spliced += 1
        await self.bind(request, spliced)
        return True

    def judge(self, inputs: list[Any]) -> None:
        """The outcome of a request rendered with the context's text."""
        head = tuple(self.tokens)
        self.outcome = "hit" if all(
            tuple(inp.get("prompt_token_ids", ())[:len(head)]) == head for inp in inputs
        ) else "miss; reason=prompt-mismatch"



def splice_context(serving: Any) -> None:
    """Make ``serving.render_chat_request`` (vLLM's chat renderer: the engine inputs,
    or an ErrorResponse) put a team chat's context tokens in place of the rendered
    placeholder's (``EngineHost.team_chat``), and bind it (``ContextSplice.bind``).
    When the placeholder is not found (a template that rewrites the system message),
    or the context was rendered in another frame, it renders the request again with
    the context's text."""
    inner = serving.render_chat_request

    async def render(request: Any) -> Any:
        found: ContextSplice | None = getattr(request, "_granikv_splice", None)
        out = await inner(request)
        if found is None or isinstance(out, ErrorResponse) or await found.into(request,
                                                                               out[1]):
            return out
        request.messages[0] = {"role": "system", "content": found.text}
        out = await inner(request)
        if not isinstance(out, ErrorResponse):
            found.judge(out[1])
        return out

    serving.render_chat_request = render

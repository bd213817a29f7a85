"""EngineHost: one vLLM ``AsyncLLM`` with GraniKV, and vLLM's own OpenAI serving objects.

This is the platform's vLLM adapter: chat and completions go through vLLM's
``OpenAIServingChat`` / ``OpenAIServingCompletion`` (the same request validation, chat
template rendering, ``vllm_xargs`` -> ``SamplingParams.extra_args``, SSE chunks as
``vllm serve``), and prefix control through ``granikv_engine.vllm_plugin.client``.
No Ray here; ``replica.py`` puts it in a Serve deployment.

Answers cross the Ray boundary as items (``protocol.py``): ``JsonItem``, ``SseItem``
or ``ErrorItem``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import State
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.openai.api_server import init_app_state
from vllm.entrypoints.openai.engine.protocol import ErrorResponse
from vllm.entrypoints.serve.tokenize.protocol import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeRequest,
)
from vllm.entrypoints.serve.utils.error_response import create_error_response
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.async_llm import AsyncLLM

from granikv_engine.vllm_plugin import installed
from granikv_engine.vllm_plugin.client import acontrol, aregister
from granikv_platform import engine_responses
from granikv_platform.context_frame import Frame, frame_of
from granikv_platform.engine_stats import ThroughputLogger, stat_loggers
from granikv_platform.frontend import frontend_namespace
from granikv_platform.input_checks import InputChecks
from granikv_platform.openai_bodies import ChatCompletionRequest, CompletionRequest
from granikv_platform.protocol import (
    Item,
    JsonItem,
    SseItem,
    error_item,
    headed,
    validation_message,
)
from granikv_platform.registry import PrefixSpec
from granikv_platform.request_path import ControlPlaneCalls
from granikv_platform.stream_collect import as_stream, assemble_chat, events, forced_tool
from granikv_platform.stream_end import StreamEnd, before_done, error_event
from granikv_platform.team_splice import (
    CONTEXT_PLACEHOLDER,
    FRAME_PROBE,
    ContextSplice,
    SpliceCounters,
    VariantBinder,
    splice_context,
)
from granikv_platform.token_ids import detokenize_problem
from granikv_platform.tool_finish import keep_length

logger = logging.getLogger("ray.serve")

# Response header of a team chat: whether its prompt starts with the team's HOT prefix.
PREFIX_HEADER = "x-granikv-prefix"
DISPATCH_KEYS = ("dispatch", "dispatch_ranks_agree")  # the workers' part of the stats

class EngineHost:
    """Start with ``await EngineHost.start(engine_args)``; ``shutdown()`` stops it."""

    def __init__(self, llm: AsyncLLM, state: State, throughput: ThroughputLogger) -> None:
        self.llm = llm
        self.state = state
        self.throughput = throughput
        self.max_model_len: int = llm.model_config.max_model_len
        self.vocab_size: int = llm.model_config.get_vocab_size()
        self.calls = ControlPlaneCalls()  # replaced by the replica's, shared with its hub
        self.splices = SpliceCounters()
        self._frame: Frame | None = None
        self._placeholder: tuple[int, ...] | None = None
        # context prefix id -> its content tokens (None: not in the frame), cut once
        self._contents: dict[str, tuple[int, ...] | None] = {}
        self._dispatch: dict[str, Any] = {}  # the workers' counters, as last asked
        self._dispatch_at = -math.inf  # when (time.monotonic)

    @classmethod
    async def start(cls, engine_args: dict[str, Any], vllm_config: Any = None,
                    reinit_seed: int | None = None,
                    max_prompt_tokens: int | None = None,
                    frontend: dict[str, Any] | None = None) -> EngineHost:
        """``vllm_config``: built elsewhere (on a GPU, see placement.py), else here.
        ``max_prompt_tokens``: refuse longer prompts (400) below max_model_len.
        ``frontend``: vLLM's front-end options (``config.frontend``: tool calling, chat
        template, ...) for its serving objects."""
        installed.check()  # else vLLM starts a plain engine core, found out much later
        ea = AsyncEngineArgs(**engine_args)
        if vllm_config is None:
            vllm_config = make_vllm_config(engine_args)
        throughput = ThroughputLogger(vllm_config)
        llm = AsyncLLM.from_vllm_config(
            vllm_config, usage_context=UsageContext.OPENAI_API_SERVER,
            stat_loggers=stat_loggers(throughput), disable_log_stats=ea.disable_log_stats)
        if reinit_seed is not None:  # dummy weights: make outputs depend on the input
            await llm.collective_rpc("granikv_reinit_weights", kwargs={"seed": reinit_seed})
        state = State()
        args = frontend_namespace(frontend or {}, ea)
        await init_app_state(llm, state, args,
                             supported_tasks=await llm.get_supported_tasks())
        splice_context(state.openai_serving_chat)
        keep_length(state.openai_serving_chat)  # a cut tool call says "length"
        max_len = llm.model_config.max_model_len
        cap = max_prompt_tokens if max_prompt_tokens and max_prompt_tokens < max_len else None
        checks = InputChecks(llm.model_config.get_vocab_size(), max_len,
                             str(vllm_config.structured_outputs_config.backend), cap)
        checks.install(state.openai_serving_chat, "render_chat_request")
        checks.install(state.openai_serving_completion, "render_completion_request")
        if state.openai_serving_responses is not None:
            engine_responses.install(state.openai_serving_responses, checks)
        return cls(llm, state, throughput)

    def shutdown(self) -> None:
        self.llm.shutdown()

    async def check_health(self) -> None:
        """Raises unless the engine core answers a round trip."""
        await self.llm.check_health()
        await acontrol(self.llm, "list", team="")

    # ---- OpenAI -------------------------------------------------------------------
    async def chat(self, body: dict[str, Any],
                   splice: ContextSplice | None = None) -> AsyncIterator[Item]:
        # an unstreamed chat with a forced tool: its stream, assembled (stream_collect.py)
        gather = forced_tool(body) and not body.get("stream") and not body.get("logprobs")
        if gather:
            body = as_stream(body)
        try:
            request = ChatCompletionRequest.model_validate(body)
        except ValidationError as e:
            yield error_item(422, validation_message(e))
            return
        if splice is not None:  # team_chat: read by the renderer (splice_context)
            request._granikv_splice = splice  # type: ignore[attr-defined]
        try:
            out = await self.state.openai_serving_chat.create_chat_completion(request, None)
        except Exception as e:  # vllm serve's exception handlers, as items
            out = _failed("chat", e)
        async for item in (_gathered(_items(out)) if gather else _items(out)):
            yield item

    async def completions(self, body: dict[str, Any]) -> AsyncIterator[Item]:
        try:
            request = CompletionRequest.model_validate(body)
        except ValidationError as e:
            yield error_item(422, validation_message(e))
            return
        try:
            out = await self.state.openai_serving_completion.create_completion(request, None)
        except Exception as e:
            out = _failed("completion", e)
        async for item in _items(out):
            yield item

    async def team_chat(self, body: dict[str, Any], context: PrefixSpec,
                        variant: VariantBinder | None = None) -> AsyncIterator[Item]:
        """A chat whose conversation starts with ``context`` as its system message,
        without rendering or tokenizing the context's text: the chat template renders a
        placeholder in its place, and the placeholder's content tokens are replaced by
        the context's (from ``context.token_ids``, rendered when it was set). The
        request is bound to the context's prefix, or, when the template put something
        else around the context (tools), to the prefix ``variant`` gives for what
        precedes the context plus the context. A template that frames the context
        differently from the placeholder is rendered in full."""
        splice_ = await self._splice(context, variant)
        messages = [{"role": "system", "content": CONTEXT_PLACEHOLDER}, *body["messages"]]
        async for item in with_outcome(self.chat({**body, "messages": messages}, splice_),
                                       splice_):
            yield item

    async def responses(self, body: dict[str, Any],
                        splice: ContextSplice | None = None) -> AsyncIterator[Item]:
        """``POST /v1/responses`` through vLLM's serving object (engine_responses.py)."""
        async for item in engine_responses.responses(self.state.openai_serving_responses,
                                                     body, splice):
            yield item

    async def team_responses(self, body: dict[str, Any], context: PrefixSpec,
                             variant: VariantBinder | None = None) -> AsyncIterator[Item]:
        """A response whose conversation starts with ``context`` as its system message,
        spliced and bound as a team chat's (``team_chat``). The caller's own
        ``instructions`` follow it, as a second system message: vLLM would put them
        first."""
        splice_ = await self._splice(context, variant)
        head = [{"role": "system", "content": CONTEXT_PLACEHOLDER}]
        if body.get("instructions"):
            head.append({"role": "system", "content": body["instructions"]})
        given = body.get("input")
        items = [{"role": "user", "content": given}] if isinstance(given, str) else given
        request = {**body, "instructions": None,
                   "input": [*head, *items] if isinstance(items, list) else items}
        async for item in with_outcome(self.responses(request, splice_), splice_):
            yield item

    async def _splice(self, context: PrefixSpec,
                      variant: VariantBinder | None) -> ContextSplice:
        """A team request's splice of ``context`` (its content tokens cut once)."""
        frame, placeholder = await self._context_frame()
        if context.prefix_id not in self._contents:
            if len(self._contents) >= 256:  # contexts replaced meanwhile: start over
                self._contents.clear()
            self._contents[context.prefix_id] = frame.content(context.token_ids)
        content = self._contents[context.prefix_id]
        return ContextSplice(placeholder, content, context.token_ids, context.text or "",
                             self.splices, variant, frame=frame)

    async def _context_frame(self) -> tuple[Frame, tuple[int, ...]]:
        """The template's frame of a lone system message, and the placeholder's content
        tokens in it (rendered once)."""
        if self._frame is None or self._placeholder is None:
            rendered = await self.render_system(CONTEXT_PLACEHOLDER)
            frame = frame_of(rendered, await self.render_system(FRAME_PROBE))
            content = frame.content(rendered)
            if content is None:
                raise ValueError("the chat template renders no system message content")
            self._frame, self._placeholder = frame, content
        return self._frame, self._placeholder

    # ---- tokens -------------------------------------------------------------------
    async def tokenize_body(self, body: dict[str, Any]) -> Item:
        """``POST /tokenize`` of ``vllm serve``: a prompt or chat messages -> token ids."""
        try:
            request = _TOKENIZE.validate_python(body)
        except ValidationError as e:
            return error_item(422, validation_message(e))
        return await _unary(self.state.serving_tokenization.create_tokenize(request, None))

    async def detokenize_body(self, body: dict[str, Any]) -> Item:
        """``POST /detokenize`` of ``vllm serve``: token ids -> text."""
        try:
            request = DetokenizeRequest.model_validate(body)
        except ValidationError as e:
            return error_item(422, validation_message(e))
        tokenizer = self.llm.renderer.tokenizer
        why = detokenize_problem(request.tokens, len(tokenizer)) if tokenizer else None
        if why is not None:
            return error_item(400, why)
        return await _unary(self.state.serving_tokenization.create_detokenize(request, None))

    async def render_system(self, text: str) -> list[int]:
        """Token ids of ``text`` as a lone system message through the chat template,
        without a generation prompt: the exact head of every conversation that starts
        with it (given a boundary-safe template)."""
        req = TokenizeChatRequest(messages=[{"role": "system", "content": text}],
                                  add_generation_prompt=False)
        out = await self.state.serving_tokenization.create_tokenize(req, None)
        if isinstance(out, ErrorResponse):
            raise ValueError(out.error.message)
        return list(out.tokens)

    def tokenize(self, text: str) -> list[int]:
        """As /v1/completions tokenizes a text prompt (with the tokenizer's BOS)."""
        tokenizer = self.llm.renderer.tokenizer
        if tokenizer is None:
            raise ValueError("this engine runs without a tokenizer; send token_ids")
        return list(tokenizer.encode(text, add_special_tokens=True))

    # ---- prefixes -----------------------------------------------------------------
    async def list_prefixes(self) -> list[dict[str, Any]]:
        return list((await self._control("list"))["prefixes"])

    async def get_prefix(self, prefix_id: str, team: str) -> dict[str, Any]:
        return await self._control("get", prefix_id=prefix_id, team=team)

    async def register(self, spec: PrefixSpec) -> dict[str, Any]:
        self.calls.count_engine()
        return await aregister(self.llm, spec.team, spec.token_ids, spec.prefix_id, spec.pin)

    async def unregister(self, prefix_id: str, team: str) -> dict[str, Any]:
        return await self._control("unregister", prefix_id=prefix_id, team=team)

    async def set_pin(self, prefix_id: str, team: str, pin: bool) -> dict[str, Any]:
        return await self._control("pin" if pin else "unpin", prefix_id=prefix_id, team=team)

    async def set_hot_budgets(self, teams: dict[str, int | None], default: int,
                              floor: int) -> dict[str, Any]:
        """Each team's HOT budget in this engine (``Control.op_hot_budgets``)."""
        return await self._control("hot_budgets", teams=teams, default=default, floor=floor)

    async def _control(self, op: str, **args: Any) -> dict[str, Any]:
        self.calls.count_engine()
        return await acontrol(self.llm, op, **args)

    async def stats(self, dispatch_max_age_s: float = 0.0) -> dict[str, Any]:
        """The workers' dispatcher counters are asked again only when the last ones are
        older than ``dispatch_max_age_s``: each call to the workers keeps an idle
        worker's message-queue poller busy for a second (``engine_hooks.granikv_control``)."""
        now = time.monotonic()
        workers = now - self._dispatch_at >= dispatch_max_age_s
        engine = await acontrol(self.llm, "stats", workers=workers)
        if workers:
            self._dispatch = {k: engine[k] for k in DISPATCH_KEYS if k in engine}
            self._dispatch_at = now
        else:
            engine.update(self._dispatch)
        return {"granikv": engine, "frontend": self.throughput.snapshot()}


def _failed(kind: str, e: Exception) -> ErrorResponse:
    """vLLM serve's answer to an exception raised while serving, with its cause logged."""
    out = create_error_response(e)
    logger.warning("%s request failed (%d): %r", kind, out.error.code, e,
                   exc_info=e if out.error.code >= 500 else None)
    return out


async def with_outcome(items: AsyncIterator[Item],
                       splice: ContextSplice) -> AsyncIterator[Item]:
    """``items`` with the splice's outcome (``x-granikv-prefix``) on the first: it is
    known once the request was rendered and bound."""
    first = True
    async for item in items:
        if first:
            item = headed(item, {PREFIX_HEADER: splice.outcome})
        first = False
        yield item


def make_vllm_config(engine_args: dict[str, Any]) -> Any:
    ea = AsyncEngineArgs(**engine_args)
    return ea.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


_TOKENIZE: TypeAdapter[TokenizeRequest] = TypeAdapter(TokenizeRequest)


async def _unary(call: Any) -> Item:
    try:
        out = await call
    except Exception as e:  # vllm serve's exception handlers, as an item
        out = create_error_response(e)
    if isinstance(out, ErrorResponse):
        return error_item(out.error.code, out.error.message, out.error.type)
    return JsonItem(out.model_dump(mode="json"))


async def _items(out: Any) -> AsyncIterator[Item]:
    if isinstance(out, ErrorResponse):
        yield error_item(out.error.code, out.error.message, out.error.type)
    elif hasattr(out, "__aiter__"):  # stream=True: SSE lines, "data: [DONE]" last
        async for item in _stream(out):
            yield item
    else:
        yield JsonItem(out.model_dump(mode="json"))


async def _stream(chunks: AsyncIterator[str]) -> AsyncIterator[Item]:
    """vLLM's SSE chunks; a stream that would end with neither a finish nor an error
    event (a request the engine failed after admission), or that raises, ends with an
    OpenAI-shaped error event before its ``[DONE]``."""
    end = StreamEnd()
    try:
        async for chunk in chunks:
            end.see(chunk)
            if end.done and end.abnormal:
                logger.warning("a stream ended with no finish_reason and no error event")
                chunk = before_done(chunk, error_event(
                    "the request failed in the engine before it finished"))
            yield SseItem(chunk)
    except Exception as e:
        logger.warning("a stream failed: %r", e, exc_info=e)
        yield SseItem(error_event("the request failed in the engine before it finished")
                      + "data: [DONE]\n\n")
        return
    if not end.done:  # ended without [DONE]
        logger.warning("a stream ended without [DONE]")
        yield SseItem((error_event("the request failed in the engine before it finished")
                       if end.abnormal else "") + "data: [DONE]\n\n")


async def _gathered(items: AsyncIterator[Item]) -> AsyncIterator[Item]:
    """A stream's items as one JSON answer (``assemble_chat``); an error item as it is."""
    texts: list[str] = []
    async for item in items:
        if not isinstance(item, SseItem):
            yield item
            return
        texts.append(item.text)
    answer = assemble_chat(events(texts))
    err = answer.get("error")
    if isinstance(err, dict):
        yield error_item(int(err.get("code") or 500), str(err.get("message") or "failed"),
                         err.get("type"))
        return
    yield JsonItem(answer)

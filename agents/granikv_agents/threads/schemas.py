"""The bodies of LangGraph Server's routes (pydantic): what ``langgraph-sdk`` sends.

Fields that change nothing here are accepted and ignored, as the SDK sends them
(``config``, ``context``: the platform makes each run's context; ``durability``: runs
save every step; ``stream_resumable``: every stream is). Fields whose meaning the
platform does not carry out are refused with a 422 that names them (``UNSUPPORTED``);
the ones it uses are validated here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from granikv_agents.threads.options import multitask
from granikv_platform.database import MAX_ROWS

StreamMode = Literal["values", "updates", "messages", "messages-tuple", "custom", "debug",
                     "tasks", "checkpoints", "events"]
# a run field -> why it is refused when set (a value other than the SDK's default)
UNSUPPORTED = {"webhook": "webhooks are not sent",
               "after_seconds": "delayed runs are not supported",
               "stream_subgraphs": "subgraph streams are not supported",
               "subgraphs": "subgraph states are not supported",
               "select": "select is not supported: the whole state is returned"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class Page(_Lenient):
    """POST /assistants/search, /threads/search."""

    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=MAX_ROWS)


class ThreadCreate(_Lenient):
    thread_id: str | None = Field(None, min_length=1, max_length=128,
                                  description="Generated (a UUID) when absent.")
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = Field(
        None, description="A taken id: 409 (raise, the default) or the existing thread.")


class _Refusing(_Lenient):
    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for field, why in UNSUPPORTED.items():
                if data.get(field) not in (None, False, 0, []):
                    raise ValueError(f"{field}: {why}")
        return data


class ThreadPatch(_Lenient):
    """PATCH /threads/{id}: merged into the thread's metadata."""

    metadata: dict[str, Any] = Field(default_factory=dict)


class Checkpoint(_Lenient):
    checkpoint_id: str | None = Field(None, max_length=128)
    checkpoint_ns: Literal[""] = Field("", description="The root graph's (no subgraphs).")


class CheckpointQuery(_Refusing):
    """POST /threads/{id}/state/checkpoint: the state at that checkpoint."""

    checkpoint: Checkpoint


class StateUpdate(_Lenient):
    """POST /threads/{id}/state."""

    values: dict[str, Any] | None = None
    as_node: str | None = Field(None, max_length=128)
    checkpoint_id: str | None = Field(None, max_length=128)
    checkpoint: Checkpoint | None = None

    def at(self) -> str | None:
        return self.checkpoint_id or (self.checkpoint.checkpoint_id if self.checkpoint
                                      else None)


class HistoryQuery(_Refusing):
    """POST /threads/{id}/history: newest first."""

    limit: int = Field(10, ge=1, le=1000)
    before: str | Checkpoint | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: Checkpoint | None = None

    def before_id(self) -> str | None:
        return self.before.checkpoint_id if isinstance(self.before, Checkpoint) \
            else self.before


class CommandBody(_Lenient):
    resume: Any = Field(None, description="The answer to the pending interrupt().")
    update: dict[str, Any] | None = None
    goto: str | list[str] | None = None


class RunCreate(_Refusing):
    """POST /threads/{id}/runs (and /runs/stream, /runs/wait)."""

    assistant_id: str = Field(min_length=1, max_length=128, description="A spec file of "
                              "the team (assistant id = its name).")
    input: dict[str, Any] | None = None
    command: CommandBody | None = None
    stream_mode: StreamMode | list[StreamMode] | None = None
    metadata: dict[str, Any] | None = None
    interrupt_before: Literal["*"] | list[str] | None = Field(
        None, description="Pause before these nodes (their names, or every one: *).")
    interrupt_after: Literal["*"] | list[str] | None = None
    multitask_strategy: str | None = Field(
        None, description="On a busy thread: 409 (reject, the default), run after the "
        "runs before it (enqueue), or cancel the running one (interrupt); rollback is "
        "not supported.")
    checkpoint_id: str | None = Field(None, max_length=128, description="Run from this "
                                      "checkpoint of the thread (a fork), not the latest.")
    checkpoint: Checkpoint | None = None
    if_not_exists: Literal["reject", "create"] | None = None

    @field_validator("multitask_strategy")
    @classmethod
    def _strategy(cls, v: str | None) -> str | None:
        return None if v is None else multitask({"multitask_strategy": v})

    def wire(self) -> dict[str, Any]:
        """What crosses to the run service."""
        return {"assistant_id": self.assistant_id, "input": self.input,
                "command": self.command.model_dump(exclude_none=True) if self.command
                else None, "stream_mode": self.stream_mode, "metadata": self.metadata,
                "interrupt_before": self.interrupt_before,
                "interrupt_after": self.interrupt_after,
                "multitask_strategy": self.multitask_strategy,
                "checkpoint_id": self.checkpoint_id or (
                    self.checkpoint.checkpoint_id if self.checkpoint else None),
                "if_not_exists": self.if_not_exists}

"""The bodies of LangGraph Server's routes (pydantic): what ``langgraph-sdk`` sends.

Fields the platform does not use (``config``, ``webhook``, ``durability``...) are
accepted and ignored, as the SDK sends them; the ones it uses are validated here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StreamMode = Literal["values", "updates", "messages", "messages-tuple", "custom"]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class Page(_Lenient):
    """POST /assistants/search, /threads/search."""

    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class ThreadCreate(_Lenient):
    thread_id: str | None = Field(None, min_length=1, max_length=128,
                                  description="Generated (a UUID) when absent.")
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = Field(
        None, description="A taken id: 409 (raise, the default) or the existing thread.")


class CommandBody(_Lenient):
    resume: Any = Field(None, description="The answer to the pending interrupt().")
    update: dict[str, Any] | None = None
    goto: str | list[str] | None = None


class RunCreate(_Lenient):
    """POST /threads/{id}/runs (and /runs/stream, /runs/wait)."""

    assistant_id: str = Field(min_length=1, max_length=128, description="A spec file of "
                              "the team (assistant id = its name).")
    input: dict[str, Any] | None = None
    command: CommandBody | None = None
    stream_mode: StreamMode | list[StreamMode] | None = None
    metadata: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        """What crosses to the run service."""
        return {"assistant_id": self.assistant_id, "input": self.input,
                "command": self.command.model_dump(exclude_none=True) if self.command
                else None, "stream_mode": self.stream_mode, "metadata": self.metadata}

"""Bodies and answers of the platform's own routes (prefixes, team contexts).

The OpenAI routes use vLLM's request models (``ChatCompletionRequest``,
``CompletionRequest``) unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PREFIX_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class PrefixCreate(BaseModel):
    """POST /v1/prefixes: register (fill and pin) a prefix of the calling team."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(None, min_length=1, description="Tokenized as /v1/completions "
                             "tokenizes a prompt (with BOS).")
    token_ids: list[int] | None = Field(None, min_length=1, description="Exact token ids; "
                                        "bound prompts must start with them.")
    prefix_id: str | None = Field(None, pattern=PREFIX_ID_PATTERN, description="Default: "
                                  "'<team>-<hash of the tokens>'.")
    pin: bool = Field(True, description="Pinned prefixes are never evicted from HOT.")

    @model_validator(mode="after")
    def _one_source(self) -> PrefixCreate:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError("give exactly one of 'text' or 'token_ids'")
        return self


class PrefixView(BaseModel):
    prefix_id: str = Field(description="The team's own id (another team may use the same "
                           "id for its own prefix).")
    team: str
    kind: Literal["prefix", "context", "variant"] = "prefix"
    length: int = Field(description="Tokens.")
    state: str = Field(description="ready (in HOT), filling, or cold (served from paged KV).")
    hot_start: int | None = Field(None, description="First HOT slot, when ready.")
    pinned: bool
    hits: int = Field(0, description="Requests that read it, on the replica that answered.")
    content_hash: str


class PrefixList(BaseModel):
    object: Literal["list"] = "list"
    data: list[PrefixView]


class TeamContextIn(BaseModel):
    """PUT /teams/{team}/context."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, description="The team's shared context; it becomes the "
                      "system message first in every team chat, pinned as a HOT prefix.")


class TeamContext(PrefixView):
    text: str


def record_view(spec: Any, rec: dict[str, Any]) -> dict[str, Any]:
    """The API view of a registry spec and the engine's record of it."""
    return PrefixView(
        prefix_id=spec.team_id, team=spec.team, kind=spec.kind, length=spec.length,
        state=rec.get("state", "cold"), hot_start=rec.get("hot_start"),
        pinned=bool(rec.get("pinned", spec.pin)), hits=int(rec.get("hits", 0)),
        content_hash=spec.content_hash).model_dump()

"""How a request talks to GraniKV: ``SamplingParams.extra_args``.

Two spellings, the same meaning:
- nested, for ``LLM``/``AsyncLLM``: ``extra_args={"granikv": {"team": "red",
  "prefix_id": "red-ctx", "register": True}}``;
- flat, for the OpenAI server's ``vllm_xargs`` (which only carries scalars):
  ``{"granikv_team": "red", "granikv_prefix_id": "red-ctx", "granikv_register": 1}``.

``register``: this request's prompt *is* the team context; its prefill writes the HOT
range and pins it. Otherwise, ``prefix_id`` binds the request to a registered prefix
(its prompt must start with the prefix tokens), and without one a prompt that starts
with one of its team's prefixes is bound to the longest such prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_FLAT = "granikv_"


@dataclass(frozen=True)
class GraniKVArgs:
    team: str | None = None
    prefix_id: str | None = None
    register: bool = False
    pin: bool = True

    @classmethod
    def from_extra_args(cls, extra: Mapping[str, Any] | None) -> GraniKVArgs | None:
        """None when the request carries no GraniKV arguments. Raises ValueError on
        malformed ones."""
        if not extra:
            return None
        raw: dict[str, Any] = {}
        nested = extra.get("granikv")
        if nested is not None:
            if not isinstance(nested, Mapping):
                raise ValueError("extra_args['granikv'] must be a mapping")
            raw.update(nested)
        raw.update({k[len(_FLAT):]: v for k, v in extra.items() if k.startswith(_FLAT)})
        if not raw:
            return None
        unknown = set(raw) - {"team", "prefix_id", "register", "pin"}
        if unknown:
            raise ValueError(f"unknown granikv request arguments {sorted(unknown)}")
        team, pid = raw.get("team"), raw.get("prefix_id")
        for name, val in (("team", team), ("prefix_id", pid)):
            if val is not None and (not isinstance(val, str) or not val):
                raise ValueError(f"granikv {name} must be a non-empty string")
        return cls(team=team, prefix_id=pid, register=_flag(raw.get("register", False)),
                   pin=_flag(raw.get("pin", True)))

    def to_extra_args(self) -> dict[str, Any]:
        d: dict[str, Any] = {"register": self.register, "pin": self.pin}
        if self.team:
            d["team"] = self.team
        if self.prefix_id:
            d["prefix_id"] = self.prefix_id
        return {"granikv": d}

    def to_vllm_xargs(self) -> dict[str, Any]:
        return {_FLAT + k: (int(v) if isinstance(v, bool) else v)
                for k, v in self.to_extra_args()["granikv"].items()}


def _flag(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("1", "true", "yes", "0", "false", "no"):
        return v.lower() in ("1", "true", "yes")
    raise ValueError(f"granikv flag must be a boolean, got {v!r}")

"""Who is calling, and what a request may bind to.

Team identity comes from the ``X-GraniKV-Team`` header for now. Every route resolves it
through ``resolve_team`` (or the dependencies below), so the security work can replace
the header with per-team API keys in this one place.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from granikv_platform.config import TEAM_RE
from granikv_platform.errors import ApiError

TEAM_HEADER = "X-GraniKV-Team"
# Requests without a team are scoped to this name, which no real team can take (TEAM_RE):
# prompt matching then never binds them to a team's prefix.
ANONYMOUS = "_anonymous"
_ALLOWED_XARGS = {"granikv_team", "granikv_prefix_id"}


def resolve_team(request: Request, path_team: str | None = None) -> str | None:
    """The calling team, or None when the request names none. On a /teams/{team}
    route the header, if given, must agree with the path."""
    header = request.headers.get(TEAM_HEADER)
    if header is not None and not TEAM_RE.match(header):
        raise ApiError(400, f"{TEAM_HEADER} must match {TEAM_RE.pattern}")
    if path_team is not None:
        if header is not None and header != path_team:
            raise ApiError(403, f"{TEAM_HEADER} {header!r} may not use team {path_team!r}")
        return path_team
    return header


async def optional_team(request: Request) -> str | None:
    return resolve_team(request)


async def required_team(request: Request) -> str:
    team = resolve_team(request)
    if team is None:
        raise ApiError(401, f"this route needs the {TEAM_HEADER} header")
    return team


def bind_body(body: dict[str, Any], team: str | None,
              prefix_id: str | None = None) -> dict[str, Any]:
    """``body`` with its ``vllm_xargs`` scoped to ``team`` (and bound to ``prefix_id``).

    Only ``granikv_team`` (which must be the caller's) and ``granikv_prefix_id`` are
    accepted from clients: registration goes through POST /v1/prefixes, so that the
    platform's registry stays the one list of prefixes.
    """
    xargs = dict(body.get("vllm_xargs") or {})
    extra = sorted(k for k in xargs if k.startswith("granikv_") and k not in _ALLOWED_XARGS)
    if extra:
        raise ApiError(400, f"vllm_xargs {extra} are not accepted; register prefixes with "
                       "POST /v1/prefixes")
    claimed = xargs.get("granikv_team")
    if team is None and (claimed is not None or "granikv_prefix_id" in xargs):
        raise ApiError(401, f"binding to a prefix needs the {TEAM_HEADER} header")
    if claimed is not None and claimed != team:
        raise ApiError(403, f"vllm_xargs.granikv_team {claimed!r} is not the calling team")
    pid = prefix_id or xargs.get("granikv_prefix_id")
    if pid is not None and (not isinstance(pid, str) or not pid):
        raise ApiError(400, "vllm_xargs.granikv_prefix_id must be a non-empty string")
    xargs["granikv_team"] = team or ANONYMOUS  # prompt matching: the caller's prefixes only
    if pid is not None:
        xargs["granikv_prefix_id"] = pid
    return {**body, "vllm_xargs": xargs}

"""Who is calling, and what a request may bind to.

The one place that decides a request's team. With ``auth.mode: keys`` (the default) the
team is the API key's (``Authorization: Bearer <key>``, see auth.py): no key or an
unknown key is 401, an ``X-GraniKV-Team`` header naming another team is 403, and so is
a /teams/{team} route of another team. An operator key (``@admin``) reads /metrics and
/v1/granikv/stats and nothing else. With ``auth.mode: none`` the team is the header (or
the route's), and requests without one are anonymous.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from granikv_platform.auth import Authenticator, Principal
from granikv_platform.errors import ApiError
from granikv_platform.names import TEAM_HEADER, TEAM_RE
from granikv_platform.registry import scoped_id

# Requests without a team are scoped to this name, which no real team can take (TEAM_RE):
# prompt matching then never binds them to a team's prefix.
ANONYMOUS = "_anonymous"
_ALLOWED_XARGS = {"granikv_team", "granikv_prefix_id"}


def caller(request: Request) -> Principal:
    """The request's principal (cached on the request); AuthError (401) without a
    valid key when keys are required."""
    cached = getattr(request.state, "granikv_principal", None)
    if cached is None:
        auth: Authenticator = request.app.state.granikv_auth
        key = request.headers.get("x-api-key")  # langgraph-sdk's header for the same key
        cached = auth.authenticate(request.headers.get("authorization")
                                   or (f"Bearer {key}" if key else None))
        request.state.granikv_principal = cached
    return cached  # type: ignore[no-any-return]


def resolve_team(request: Request, path_team: str | None = None) -> str | None:
    """The calling team, or None when the request names none (``auth: none`` only).
    On a /teams/{team} route the caller must be that team."""
    who = caller(request)
    header = request.headers.get(TEAM_HEADER)
    if header is not None and not TEAM_RE.match(header):
        raise ApiError(400, f"{TEAM_HEADER} must match {TEAM_RE.pattern}")
    team = header
    if who.keyed:
        if who.team is None:
            raise ApiError(403, "an operator key reads /metrics and /v1/granikv/stats "
                           "only; use a team's key")
        if header is not None and header != who.team:
            raise ApiError(403, f"the API key is team {who.team!r}'s; {TEAM_HEADER} "
                           f"names {header!r}")
        team = who.team
    if path_team is not None:
        if team is not None and team != path_team:
            raise ApiError(403, f"team {team!r} may not use team {path_team!r}'s routes")
        return path_team
    return team


def require_operator(request: Request) -> None:
    """Operations routes: an operator key (any caller with ``auth: none``)."""
    if not caller(request).operator:
        raise ApiError(403, "this route needs an operator key (@admin in the keys file)")


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
    platform's registry stays the one list of prefixes. A prefix id is the team's own:
    the engine gets it in the team's scope (``registry.scoped_id``), where no other
    team's prefix can be.
    """
    xargs = body.get("vllm_xargs") or {}
    if not isinstance(xargs, dict):
        raise ApiError(400, "vllm_xargs must be an object")
    xargs = dict(xargs)
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
        xargs["granikv_prefix_id"] = scoped_id(xargs["granikv_team"], pid)
    return {**body, "vllm_xargs": xargs}

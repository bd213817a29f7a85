"""Who is calling (API keys, or the team header with ``auth: none``) and vllm_xargs
scoping: identity.py and auth.py, without Ray."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

from granikv_platform.auth import (
    OPERATOR,
    Authenticator,
    AuthError,
    KeyFileError,
    KeyRing,
    digest,
    new_key,
    plain_keys,
    write_keys_file,
)
from granikv_platform.config import AuthConfig
from granikv_platform.errors import ApiError
from granikv_platform.identity import (
    ANONYMOUS,
    TEAM_HEADER,
    bind_body,
    require_operator,
    resolve_team,
)

RED, BLUE, ADMIN = new_key(), new_key(), new_key()
RING = KeyRing.parse(f"red: {RED}\nblue: sha256:{digest(BLUE)}\n{OPERATOR}: {ADMIN}\n")


def request(team: str | None = None, key: str | None = None,
            auth: Authenticator | None = None) -> Request:
    headers = [(TEAM_HEADER.lower().encode(), team.encode())] if team else []
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    app = SimpleNamespace(state=SimpleNamespace(granikv_auth=auth or Authenticator(None)))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers,
                    "app": app})


def keyed(team: str | None = None, key: str | None = None) -> Request:
    return request(team, key, Authenticator(RING))


def code_of(fn: Any, *args: Any, **kw: Any) -> int:
    try:
        fn(*args, **kw)
    except (ApiError, AuthError) as e:
        return e.status
    return 200


def test_resolve_team_from_the_header_without_keys() -> None:
    assert resolve_team(request("red")) == "red"
    assert resolve_team(request(None)) is None
    assert resolve_team(request(None), path_team="red") == "red"
    assert resolve_team(request("red"), path_team="red") == "red"
    assert code_of(resolve_team, request("blue"), path_team="red") == 403
    assert code_of(resolve_team, request("Bad Team!")) == 400


def test_the_key_names_the_team() -> None:
    assert resolve_team(keyed(key=RED)) == "red"
    assert resolve_team(keyed(key=BLUE)) == "blue"  # listed by its digest
    assert resolve_team(keyed("red", RED), path_team="red") == "red"  # header agrees
    assert code_of(resolve_team, keyed()) == 401  # no key
    assert code_of(resolve_team, keyed(key="gk-" + "x" * 40)) == 401  # unknown key
    assert code_of(resolve_team, keyed("red")) == 401  # a header is no key
    assert code_of(resolve_team, keyed("blue", RED)) == 403  # header names another team
    assert code_of(resolve_team, keyed(key=RED), path_team="blue") == 403  # another's route
    assert code_of(resolve_team, keyed(key=ADMIN)) == 403  # operator keys: ops only
    assert code_of(require_operator, keyed(key=ADMIN)) == 200
    assert code_of(require_operator, keyed(key=RED)) == 403
    assert code_of(require_operator, keyed()) == 401
    assert code_of(require_operator, request()) == 200  # auth: none


@pytest.mark.parametrize(("header", "why"), [
    ("Basic abc", 401), (f"Bearer {RED[:-1]}", 401), ("Bearer ", 401), (f"bearer {RED}", 200),
    (f"Bearer   {RED}  ", 200)])
def test_authorization_header_forms(header: str, why: int) -> None:
    auth = Authenticator(RING)
    assert code_of(auth.authenticate, header) == why


@pytest.mark.parametrize(("text", "message"), [
    ("red gk-aaaaaaaaaaaaaaaaaaaa", "expected '<team>: <key>'"),
    ("Red Team: gk-aaaaaaaaaaaaaaaa", "neither a team name"),
    ("red: short", "16 characters"),
    ("red: gk-aaaaaaaaaaaaaaaaaaaa\nblue: gk-aaaaaaaaaaaaaaaaaaaa", "also 'red''s"),
    ("red: sha256:xyz", "16 characters"),
])
def test_bad_keys_files_say_why_without_the_key(text: str, message: str) -> None:
    with pytest.raises(KeyFileError, match=message) as e:
        KeyRing.parse(text, "keys")
    assert "aaaaaaaaaaaaaaaa" not in str(e.value)


def test_keys_file_from_config_env_and_rotation(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no keys file"):
        Authenticator.from_config(AuthConfig())  # keys required, none given
    assert not Authenticator.from_config(AuthConfig(mode="none")).required
    path = tmp_path / "keys"
    write_keys_file(path, [("red", RED), (OPERATOR, ADMIN)])
    assert path.stat().st_mode & 0o777 == 0o600
    assert plain_keys(path) == {"red": RED, OPERATOR: ADMIN}
    now = [0.0]
    auth = Authenticator.from_config(AuthConfig(), env_file=path)  # the env variable
    auth = Authenticator(auth.ring, path, reload_s=1.0, clock=lambda: now[0])
    assert auth.authenticate(f"Bearer {RED}").team == "red"
    rotated = new_key()
    write_keys_file(path, [("red", rotated)])
    os.utime(path, ns=(1, 10**18))  # a new mtime, whatever the clock's resolution
    assert auth.authenticate(f"Bearer {RED}").team == "red"  # not re-read yet
    now[0] = 2.0
    assert code_of(auth.authenticate, f"Bearer {RED}") == 401  # rotated out
    assert auth.authenticate(f"Bearer {rotated}").team == "red"
    path.write_text("red: bad")  # a broken file keeps the keys we had
    os.utime(path, ns=(1, 2 * 10**18))
    now[0] = 4.0
    assert auth.authenticate(f"Bearer {rotated}").team == "red"


def test_a_keys_file_without_a_team_key_does_not_start_a_replica(tmp_path: Path) -> None:
    """Only the operator's key: every team would be locked out. Refused at start-up,
    with the reason, as an empty file is; ``granikv keys`` cannot write one either."""
    path = tmp_path / "keys"
    for text, why in (("", "holds no key"), (f"{OPERATOR}: {ADMIN}\n", "only operator keys")):
        path.write_text(text)
        with pytest.raises(KeyFileError, match=why) as e:
            Authenticator.from_config(AuthConfig(keys_file=str(path)))
        assert ADMIN not in str(e.value)
    with pytest.raises(KeyFileError, match="every team would be locked out"):
        write_keys_file(tmp_path / "admin-only", [(OPERATOR, ADMIN)])
    assert not (tmp_path / "admin-only").exists()


def test_bind_body_scopes_to_the_caller() -> None:
    body: dict[str, Any] = {"model": "m", "vllm_xargs": {"granikv_prefix_id": "p", "x": 1}}
    out = bind_body(body, "red")
    # the team's own id, in the team's scope (registry.scoped_id)
    assert out["vllm_xargs"] == {"granikv_prefix_id": "red/p", "x": 1, "granikv_team": "red"}
    assert "granikv_team" not in body["vllm_xargs"]  # the input is not modified
    anonymous = bind_body({"model": "m"}, None)  # never matches a team's prefix
    assert anonymous == {"model": "m", "vllm_xargs": {"granikv_team": ANONYMOUS}}
    assert bind_body({"model": "m"}, "red", "ctx")["vllm_xargs"] == {
        "granikv_team": "red", "granikv_prefix_id": "red/ctx"}
    assert bind_body({"model": "m"}, "red", "red/ctx")["vllm_xargs"]["granikv_prefix_id"] \
        == "red/ctx"  # already scoped
    # another team's scoped id names a prefix in the caller's own scope, never theirs
    assert bind_body({"vllm_xargs": {"granikv_prefix_id": "blue/ctx"}}, "red")[
        "vllm_xargs"]["granikv_prefix_id"] == "red/blue/ctx"


@pytest.mark.parametrize(("team", "xargs", "status"), [
    ("red", {"granikv_register": 1}, 400),
    ("red", {"granikv_pin": 0}, 400),
    ("red", {"granikv_team": "blue"}, 403),
    (None, {"granikv_prefix_id": "p"}, 401),
    (None, {"granikv_team": "red"}, 401),
    ("red", {"granikv_prefix_id": ""}, 400),
    ("red", ["granikv_team"], 400),
])
def test_bind_body_refuses(team: str | None, xargs: Any, status: int) -> None:
    with pytest.raises(ApiError) as e:
        bind_body({"vllm_xargs": xargs}, team)
    assert e.value.status == status

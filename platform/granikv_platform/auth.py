"""API keys: who is calling, from ``Authorization: Bearer <key>``.

The keys file (``auth.keys_file``, else the GRANIKV_API_KEYS_FILE variable) has one key
per line; ``granikv keys FILE TEAM...`` writes one:

    # <principal>: <key>
    red: gk-6Qz...                 a team's key (16 characters at least); a team may have
    red: gk-Wb1...                 several, so that a key can be rotated
    blue: sha256:<64 hex digits>   a key given by its SHA-256: the file need not hold it
    @admin: gk-Hk2...              an operator key: /metrics and /v1/granikv/stats only

It lives on every LLM replica's node (on Kubernetes a mounted Secret), never in the repository.
Only the keys' SHA-256 digests are kept in memory; a presented key is hashed and looked
up. A file that holds no team's key (none at all, or only operator keys) is refused: it
would lock every team out. A replica does not start with one; each replica re-reads the
file when it changes (at most every ``reload_s``), keeping the previous keys (with an
error in the log) if the new file does not parse or holds no team's key: a file emptied
or cut down by mistake must not lock every caller out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from granikv_platform.config import TEAM_RE, AuthConfig

logger = logging.getLogger("ray.serve")

OPERATOR = "@admin"
MIN_KEY_CHARS = 16
_DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")


class KeyFileError(ValueError):
    """A keys file that is missing or malformed (the message never holds a key)."""


class AuthError(Exception):
    """No key, or a key that is not in the keys file: HTTP 401."""

    status = 401


@dataclass(frozen=True)
class Principal:
    team: str | None  # the key's team; None for an operator key, or without keys
    operator: bool  # may read /metrics and /v1/granikv/stats
    keyed: bool  # False when the app runs with auth: none


OPEN = Principal(team=None, operator=True, keyed=False)  # auth: none


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Key digests -> principals (a team name, or ``@admin``)."""

    def __init__(self, principals: dict[str, str]) -> None:
        self._by_digest = principals

    @classmethod
    def parse(cls, text: str, origin: str = "<keys>") -> KeyRing:
        out: dict[str, str] = {}
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            who, sep, secret = (p.strip() for p in line.partition(":"))
            if not sep or not secret:
                raise KeyFileError(f"{origin}:{n}: expected '<team>: <key>'")
            if who != OPERATOR and not TEAM_RE.match(who):
                raise KeyFileError(f"{origin}:{n}: {who!r} is neither a team name "
                                   f"({TEAM_RE.pattern}) nor {OPERATOR}")
            m = _DIGEST_RE.match(secret)
            if m is None and len(secret) < MIN_KEY_CHARS:
                raise KeyFileError(f"{origin}:{n}: keys need {MIN_KEY_CHARS} characters "
                                   "at least")
            d = m.group(1) if m else digest(secret)
            if out.get(d, who) != who:
                raise KeyFileError(f"{origin}:{n}: this key is also {out[d]!r}'s")
            out[d] = who
        return cls(out)

    @classmethod
    def load(cls, path: Path) -> KeyRing:
        try:
            text = path.read_text()
        except OSError as e:
            raise KeyFileError(f"cannot read the API keys file {path}: "
                               f"{e.strerror or e}") from None
        return cls.parse(text, str(path))

    def lookup(self, key: str) -> Principal | None:
        who = self._by_digest.get(digest(key))
        if who is None:
            return None
        return Principal(team=None if who == OPERATOR else who, operator=who == OPERATOR,
                         keyed=True)

    def __len__(self) -> int:
        return len(self._by_digest)

    @property
    def team_keys(self) -> int:
        return sum(1 for who in self._by_digest.values() if who != OPERATOR)


class Authenticator:
    """``authenticate(authorization header)`` -> Principal, or AuthError."""

    def __init__(self, ring: KeyRing | None, path: Path | None = None, reload_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ring = ring  # None: auth: none
        self.path = path
        self.reload_s = reload_s
        self._clock = clock
        self._checked = clock()
        self._mtime = _mtime(path)

    @classmethod
    def from_config(cls, cfg: AuthConfig, env_file: Path | None = None) -> Authenticator:
        """The app's authenticator: ``auth.keys_file``, else ``env_file``
        (GRANIKV_API_KEYS_FILE). Raises KeyFileError when keys are required and none
        can be read: a replica without keys does not start."""
        if cfg.mode == "none":
            return cls(None)
        path = Path(cfg.keys_file) if cfg.keys_file else env_file
        if path is None:
            raise KeyFileError("auth.mode is 'keys' but there is no keys file: set "
                               "auth.keys_file or GRANIKV_API_KEYS_FILE ('granikv keys "
                               "FILE TEAM...' writes one), or auth.mode: none on a "
                               "trusted machine")
        return cls(load_usable(path), path, cfg.reload_s)

    @property
    def required(self) -> bool:
        return self.ring is not None

    def authenticate(self, authorization: str | None) -> Principal:
        if self.ring is None:
            return OPEN
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthError("this route needs an API key: 'Authorization: Bearer <key>'")
        principal = self._current().lookup(key.strip())
        if principal is None:
            raise AuthError("invalid API key")
        return principal

    def _current(self) -> KeyRing:
        assert self.ring is not None
        now = self._clock()
        if self.path is not None and now - self._checked >= self.reload_s:
            self._checked = now
            mtime = _mtime(self.path)
            if mtime is not None and mtime != self._mtime:
                try:
                    self.ring = load_usable(self.path)
                    self._mtime = mtime
                    logger.info("GraniKV: reloaded %d API keys from %s", len(self.ring),
                                self.path)
                except KeyFileError as e:  # keep serving with the keys we had
                    logger.error("GraniKV: the API keys file changed and is REFUSED; "
                                 "serving with the previous keys until it is fixed: %s", e)
        return self.ring


def load_usable(path: Path) -> KeyRing:
    """The keys of ``path``; KeyFileError when it cannot be read, does not parse, or
    holds no team's key (at start-up and on every reload alike)."""
    return usable(KeyRing.load(path), str(path))


def usable(ring: KeyRing, origin: str) -> KeyRing:
    """``ring``, unless it holds no team's key: KeyFileError (every team locked out)."""
    if not len(ring):
        raise KeyFileError(f"the API keys file {origin} holds no key")
    if not ring.team_keys:
        raise KeyFileError(f"the API keys file {origin} holds only operator keys "
                           f"({OPERATOR}): every team would be locked out; add a "
                           "'<team>: <key>' line ('granikv keys FILE TEAM...' writes a "
                           "file with both)")
    return ring


def _mtime(path: Path | None) -> int | None:
    try:
        return os.stat(path).st_mtime_ns if path is not None else None
    except OSError:
        return None


# ---- writing keys files (granikv keys, make run's dev keys, tests) ------------------
def new_key() -> str:
    return f"gk-{secrets.token_urlsafe(32)}"


def write_keys_file(path: Path, keys: Iterable[tuple[str, str]]) -> None:
    """Write ``(principal, key)`` lines to ``path``, readable by its owner only."""
    text = "".join(f"{who}: {key}\n" for who, key in keys)
    usable(KeyRing.parse(text, str(path)), str(path))  # what a replica would not read
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# GraniKV API keys: '<team>: <key>', '@admin: <key>' (see auth.py)\n" + text)


def plain_keys(path: Path) -> dict[str, str]:
    """The first key given in clear text per principal of a keys file (for a local demo;
    a file of digests has none)."""
    load_usable(path)  # a file a replica would refuse is refused here too
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        who, sep, secret = (p.strip() for p in line.partition(":"))
        if sep and not line.startswith("#") and not _DIGEST_RE.match(secret):
            out.setdefault(who, secret)
    return out

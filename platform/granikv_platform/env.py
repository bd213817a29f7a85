"""Every environment variable the platform reads, read here and only here.

Ray, Serve and vLLM read their own variables (``RAY_TMPDIR``, ``VLLM_CPU_KVCACHE_SPACE``,
...); set those in a config's ``runtime_env`` so that they reach the replicas.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The package's copy of deploy/ (a link in a checkout; files in an installed wheel).
PACKAGE_DATA = Path(str(resources.files("granikv_platform")))


def data_path(rel: str) -> Path:
    """A file of the repository's deploy/ folder (``rel`` starts with ``deploy/``): the
    checkout's, else the installed package's."""
    checkout = REPO_ROOT / rel
    return checkout if checkout.exists() else PACKAGE_DATA / rel


def resolve_path(raw: str) -> Path | None:
    """An existing local path, tried as given, then relative to the repository root,
    then in the package's data (``deploy/...`` outside a checkout)."""
    for p in (Path(raw).expanduser(), REPO_ROOT / raw, PACKAGE_DATA / raw):
        if p.exists():
            return p.resolve()
    return None


DEFAULT_LOCAL_CONFIG = data_path("deploy/local.yaml")


@dataclass(frozen=True)
class PlatformEnv:
    config_path: Path  # GRANIKV_CONFIG: the Serve config `granikv run` starts
    http_host: str  # GRANIKV_HTTP_HOST: overrides the config's http_options.host
    http_port: int | None  # GRANIKV_HTTP_PORT: overrides the config's http_options.port
    ray_address: str | None  # RAY_ADDRESS: join this cluster instead of starting one
    api_keys_file: Path | None  # GRANIKV_API_KEYS_FILE: the API keys (config.auth.keys_file wins)
    serve_haproxy: bool  # RAY_SERVE_ENABLE_HA_PROXY=1: Serve's HAProxy front (Ray reads it)
    ray_auth_disabled: bool  # RAY_AUTH_MODE=disabled: Ray's token auth off (Ray reads it)

    @classmethod
    def from_environ(cls) -> PlatformEnv:
        port = os.environ.get("GRANIKV_HTTP_PORT")
        keys = os.environ.get("GRANIKV_API_KEYS_FILE")
        return cls(
            config_path=Path(os.environ.get("GRANIKV_CONFIG", str(DEFAULT_LOCAL_CONFIG))),
            http_host=os.environ.get("GRANIKV_HTTP_HOST", ""),
            http_port=int(port) if port else None,
            ray_address=os.environ.get("RAY_ADDRESS") or None,
            api_keys_file=Path(keys) if keys else None,
            serve_haproxy=os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1",
            ray_auth_disabled=os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled",
        )


@dataclass(frozen=True)
class HeaderLimits:
    """Bounds on a request's header section, applied by the HTTP server of Serve's front
    (its proxy, or a replica's own server behind HAProxy) while the header arrives. One
    front serves every application of its node, so these are the front's settings, not
    an application's."""

    max_bytes: int  # GRANIKV_MAX_HEADER_BYTES: request line and headers (default 64 KiB)
    max_count: int  # GRANIKV_MAX_HEADERS: header fields (default 100)

    @classmethod
    def from_environ(cls) -> HeaderLimits:
        return cls(max_bytes=_positive("GRANIKV_MAX_HEADER_BYTES", 64 * 1024),
                   max_count=_positive("GRANIKV_MAX_HEADERS", 100))


def _positive(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r}: a positive whole number expected")
    return int(raw)

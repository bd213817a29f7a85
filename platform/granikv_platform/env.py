"""Every environment variable the platform reads, read here and only here.

Ray, Serve and vLLM read their own variables (``RAY_TMPDIR``, ``VLLM_CPU_KVCACHE_SPACE``,
...); set those in a config's ``runtime_env`` so that they reach the replicas.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LOCAL_CONFIG = REPO_ROOT / "deploy" / "local.yaml"


@dataclass(frozen=True)
class PlatformEnv:
    config_path: Path  # GRANIKV_CONFIG: the Serve config `granikv run` starts
    http_host: str  # GRANIKV_HTTP_HOST: overrides the config's http_options.host
    http_port: int | None  # GRANIKV_HTTP_PORT: overrides the config's http_options.port
    ray_address: str | None  # RAY_ADDRESS: join this cluster instead of starting one
    api_keys_file: Path | None  # GRANIKV_API_KEYS_FILE: the API keys (config.auth.keys_file wins)

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
        )

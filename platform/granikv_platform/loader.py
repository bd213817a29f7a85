"""Reading deploy files (the only YAML reader of the platform).

A Serve config file (``serve deploy``) or a KubeRay RayService manifest (its
``spec.serveConfigV2``) -> the applications to run, each with its validated config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from granikv_platform.config import PlatformConfig

IMPORT_PATH = "granikv_platform.builder:build_app"


@dataclass(frozen=True)
class AppSpec:
    name: str
    route_prefix: str
    config: PlatformConfig


@dataclass(frozen=True)
class ServeFile:
    http_options: dict[str, Any]
    apps: list[AppSpec]


def load_serve_config(path: str | Path) -> ServeFile:
    doc = yaml.safe_load(Path(path).read_text())
    if isinstance(doc, dict) and doc.get("kind") == "RayService":
        doc = yaml.safe_load(doc["spec"]["serveConfigV2"])
    return parse_serve_config(doc, str(path))


def parse_serve_config(doc: Any, origin: str = "<config>") -> ServeFile:
    if not isinstance(doc, dict) or not isinstance(doc.get("applications"), list):
        raise ValueError(f"{origin}: not a Serve config (no 'applications' list)")
    apps = []
    for i, app in enumerate(doc["applications"]):
        if app.get("import_path") != IMPORT_PATH:
            raise ValueError(f"{origin}: applications[{i}].import_path must be {IMPORT_PATH}")
        try:
            cfg = PlatformConfig.model_validate(app.get("args") or {})
        except ValueError as e:
            raise ValueError(f"{origin}: applications[{i}] ({app.get('name')}): {e}") from e
        apps.append(AppSpec(app.get("name", cfg.name), app.get("route_prefix", "/"), cfg))
    names = [a.name for a in apps]
    if len(set(names)) != len(names):
        raise ValueError(f"{origin}: duplicate application names {names}")
    return ServeFile(dict(doc.get("http_options") or {}), apps)

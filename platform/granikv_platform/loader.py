"""Reading deploy files (the only YAML reader of the platform).

A Serve config file (``serve deploy``) or a KubeRay RayService manifest (its
``spec.serveConfigV2``) -> the applications to run, each with its validated config, and
the file's other settings kept as ``serve run`` reads them (``deployments:`` overrides,
``runtime_env``, ``logging_config``, ``proxy_location``): ``deploy_doc`` gives them back,
with the applications' (possibly edited) configs as their ``args``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from granikv_platform.config import PlatformConfig
from granikv_platform.env import resolve_path

IMPORT_PATH = "granikv_platform.builder:build_app"


@dataclass(frozen=True)
class AppSpec:
    name: str
    route_prefix: str
    config: PlatformConfig
    entry: dict[str, Any] = field(default_factory=dict)  # the file's application entry


@dataclass(frozen=True)
class ServeFile:
    http_options: dict[str, Any]
    apps: list[AppSpec]
    doc: dict[str, Any] = field(default_factory=dict)  # the whole file, as read

    def deploy_doc(self, host: str, port: int) -> dict[str, Any]:
        """The Serve config to deploy: the file with ``http_options`` host/port as given
        and every application's ``args`` its current config."""
        apps = [{**a.entry, "name": a.name, "route_prefix": a.route_prefix,
                 "import_path": IMPORT_PATH, "args": a.config.model_dump(mode="json")}
                for a in self.apps]
        http = {**self.http_options, "host": host, "port": port}
        return {**self.doc, "http_options": http, "applications": apps}


def load_serve_config(path: str | Path) -> ServeFile:
    """``path`` as given, else relative to the repository, else in the package's data
    (``deploy/local.yaml`` works from an installed wheel)."""
    doc = yaml.safe_load((resolve_path(str(path)) or Path(path)).read_text())
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
        spec = AppSpec(app.get("name", cfg.name), app.get("route_prefix", "/"), cfg, app)
        _check_overrides(spec, origin)
        apps.append(spec)
    names = [a.name for a in apps]
    if len(set(names)) != len(names):
        raise ValueError(f"{origin}: duplicate application names {names}")
    return ServeFile(dict(doc.get("http_options") or {}), apps, doc)


def deployment_names(cfg: PlatformConfig) -> list[str]:
    """The deployments ``build_app`` makes for ``cfg``, as ``deployments:`` names them."""
    return [f"{cfg.name}-llm", *(f"{cfg.name}-{s.name}" for s in cfg.services)]


def _check_overrides(spec: AppSpec, origin: str) -> None:
    """A ``deployments:`` entry must name one of the app's deployments (Serve would
    only fail at deploy time)."""
    known = deployment_names(spec.config)
    for d in spec.entry.get("deployments") or []:
        if d.get("name") not in known:
            raise ValueError(f"{origin}: application {spec.name}: deployments entry "
                             f"{d.get('name')!r} is none of its deployments {known}")

"""A local Ray cluster running the applications of a Serve config file (``make run``)."""

from __future__ import annotations

import ray
from ray import serve

from granikv_platform.builder import build_app
from granikv_platform.loader import ServeFile


def start(serve_file: ServeFile, host: str, port: int, *, ray_address: str | None = None,
          verbose: bool = False) -> str:
    """Start (or join) Ray, start Serve's HTTP proxy, deploy every application and wait
    until each is running. Returns the base URL."""
    ray.init(address=ray_address, include_dashboard=False, log_to_driver=verbose,
             namespace="granikv")
    serve.start(http_options={"host": host, "port": port})
    for app in serve_file.apps:
        serve.run(build_app(app.config), name=app.name, route_prefix=app.route_prefix)
    return f"http://{host}:{port}"


def stop() -> None:
    """Delete the applications and leave Ray (a cluster this process started stops, and
    its detached registry with it)."""
    try:
        serve.shutdown()
    finally:
        ray.shutdown()

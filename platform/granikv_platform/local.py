"""A local Ray cluster running the applications of a Serve config file (``make run``),
and the API keys of such a run."""

from __future__ import annotations

import dataclasses
import signal
import threading
from pathlib import Path

import ray
from ray import serve

from granikv_platform.auth import OPERATOR, new_key, write_keys_file
from granikv_platform.builder import build_app
from granikv_platform.loader import ServeFile


def start(serve_file: ServeFile, host: str, port: int, *, ray_address: str | None = None,
          verbose: bool = False) -> str:
    """Start (or join) Ray, start Serve's HTTP proxy, deploy every application and wait
    until each is running. Returns the base URL."""
    ray.init(address=ray_address, include_dashboard=False, log_to_driver=verbose,
             namespace="granikv")
    stop_on_sigterm()  # ray.init replaced the handler (and Ray's native one may abort)
    serve.start(http_options={"host": host, "port": port})
    for app in serve_file.apps:
        serve.run(build_app(app.config), name=app.name, route_prefix=app.route_prefix)
    return f"http://{host}:{port}"


def stop() -> None:
    """Delete the applications and leave Ray (a cluster this process started stops, and
    its detached registry with it). SIGINT and SIGTERM are ignored meanwhile: a second
    signal would leave Ray's processes behind."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if threading.current_thread() is threading.main_thread():
            signal.signal(sig, signal.SIG_IGN)
    try:
        if ray.is_initialized():
            serve.shutdown()
    finally:
        ray.shutdown()


def stop_on_sigterm() -> None:
    """SIGTERM (what a process manager sends) interrupts this process as SIGINT (Ctrl-C)
    does: KeyboardInterrupt in the main thread, so that ``finally`` blocks stop Serve and
    Ray and remove temporary files."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def with_keys_file(serve_file: ServeFile, path: Path) -> ServeFile:
    """``serve_file`` whose apps that require API keys read them from ``path``."""
    apps = [dataclasses.replace(a, config=a.config.model_copy(update={
        "auth": a.config.auth.model_copy(update={"keys_file": str(path)})}))
        if a.config.auth.mode == "keys" else a for a in serve_file.apps]
    return dataclasses.replace(serve_file, apps=apps)


def dev_keys(serve_file: ServeFile, folder: Path) -> tuple[ServeFile, dict[str, str]]:
    """Fresh API keys (every configured team and the operator) in ``folder``/api-keys,
    for a local run whose config names no keys file."""
    teams = sorted({t.name for a in serve_file.apps for t in a.config.teams})
    keys = {who: new_key() for who in [*teams, OPERATOR]}
    path = folder / "api-keys"
    write_keys_file(path, keys.items())
    return with_keys_file(serve_file, path), keys

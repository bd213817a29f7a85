"""A local Ray cluster running the applications of a Serve config file (``make run``),
and the API keys of such a run.

The file is deployed the way ``serve run FILE`` deploys it (Ray's ``serve_start`` and
the controller's ``deploy_apps``, the two private symbols used here), so its
``deployments:`` overrides, ``runtime_env``, ``logging_config`` and ``proxy_location``
apply as they would there.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path

import ray
from ray import serve
from ray.serve._private import api as serve_api
from ray.serve.schema import ServeDeploySchema

from granikv_platform.auth import OPERATOR, new_key, write_keys_file
from granikv_platform.loader import ServeFile


def start(serve_file: ServeFile, host: str, port: int, *, ray_address: str | None = None,
          verbose: bool = False, timeout_s: float = 900.0) -> str:
    """Start (or join) Ray, start Serve's HTTP proxy, deploy every application and wait
    until each is running. Returns the base URL."""
    ray.init(address=ray_address, include_dashboard=False, log_to_driver=verbose,
             namespace="granikv")
    stop_on_sigterm()  # ray.init replaced the handler (and Ray's native one may abort)
    schema = ServeDeploySchema.model_validate(serve_file.deploy_doc(host, port))
    client = serve_api.serve_start(http_options=schema.http_options.model_dump(),
                                   proxy_location=schema.proxy_location)
    client.deploy_apps(schema)
    wait_running([a.name for a in serve_file.apps], timeout_s)
    return f"http://{host}:{port}"


def wait_running(names: list[str], timeout_s: float) -> None:
    """Until every application named is RUNNING; RuntimeError with Serve's message when
    one fails to deploy."""
    deadline = time.monotonic() + timeout_s
    while True:
        apps = serve.status().applications
        states = {n: apps[n].status if n in apps else "NOT_STARTED" for n in names}
        failed = [n for n in names if states[n] == "DEPLOY_FAILED"]
        if failed:
            raise RuntimeError(f"application {failed[0]} failed to deploy: "
                               f"{apps[failed[0]].message}")
        if all(s == "RUNNING" for s in states.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"applications not running after {timeout_s:.0f} s: {states}")
        time.sleep(0.5)


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

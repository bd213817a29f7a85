"""A local Ray cluster running the applications of a Serve config file (``make run``),
and the API keys of such a run.

The file is deployed the way ``serve run FILE`` deploys it (Ray's ``serve_start`` and
the controller's ``deploy_apps``), so its ``deployments:`` overrides, ``runtime_env``,
``logging_config`` and ``proxy_location`` apply as they would there. A cluster started
here listens on 127.0.0.1 only: Ray puts every process (GCS, raylet, workers, agents) on
the node's address, and takes the loopback address only where it runs single-machine
clusters (``ray_constants.ENABLE_RAY_CLUSTER`` off, as Ray's
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets it when Ray is imported); Serve's replicas'
gRPC servers, which Ray puts on every interface, follow through a worker-process setup
hook (``loopback.py``), and the vLLM workers' store through the engine's plugin
(``granikv_engine/vllm_plugin/loopback_store.py``). It runs with Ray's token auth:
``RAY_AUTH_MODE=disabled`` is refused unless asked for. The start-up reports each stage
(Ray, Serve, each deployment's replicas, the registry, readiness) through ``echo``.
Private Ray symbols used: ``serve_start``, ``deploy_apps``,
``ray_constants.ENABLE_RAY_CLUSTER``, ``ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR``,
the node's ``get_logs_dir_path``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import ray
from ray import serve
from ray._private import ray_constants
from ray.serve._private import api as serve_api
from ray.serve.schema import ApplicationStatusOverview, ServeDeploySchema

from granikv_platform import loopback
from granikv_platform.auth import OPERATOR, new_key, write_keys_file
from granikv_platform.engine_files import EngineFiles
from granikv_platform.env import PlatformEnv
from granikv_platform.front import CALLBACK, PROXY_CALLBACK_ENV
from granikv_platform.loader import ServeFile

Echo = Callable[[str], None]
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # Ray's own switch, "0": loopback
ALLOW_NO_AUTH_FLAG = "--allow-ray-auth-disabled"  # granikv run's


def start(serve_file: ServeFile, host: str, port: int, *, ray_address: str | None = None,
          verbose: bool = False, timeout_s: float = 900.0, echo: Echo = print,
          allow_ray_auth_disabled: bool = False) -> str:
    """Start (or join) Ray, start Serve's HTTP proxy, deploy every application and wait
    until each is running and ready (its ``/readyz``). Returns the base URL."""
    t0 = time.monotonic()

    def say(msg: str) -> None:
        echo(f"[{time.monotonic() - t0:4.0f} s] {msg}")

    logs = start_ray(ray_address, verbose, allow_ray_auth_disabled)
    stop_on_sigterm()  # ray.init replaced the handler (and Ray's native one may abort)
    say(f"Ray: {'joined ' + ray_address if ray_address else 'a local cluster on 127.0.0.1'}"
        f"; the server's logs: {logs} (Serve's in serve/, the replicas' in worker-*)")
    schema = ServeDeploySchema.model_validate(serve_file.deploy_doc(host, port))
    client = serve_api.serve_start(http_options=schema.http_options.model_dump(),
                                   proxy_location=schema.proxy_location)
    names = [a.name for a in serve_file.apps]
    say(f"Serve: HTTP on {host}:{port}; deploying {', '.join(names)}")
    client.deploy_apps(schema)
    deadline = time.monotonic() + timeout_s
    wait_running(names, deadline - time.monotonic(), say, registries(serve_file))
    url = f"http://{host}:{port}"
    for a in serve_file.apps:
        wait_ready(url + a.route_prefix.rstrip("/"), a.name, deadline, say)
    return url


def start_ray(ray_address: str | None, verbose: bool,
              allow_ray_auth_disabled: bool = False) -> Path:
    """Join ``ray_address``, or start a cluster of this process on 127.0.0.1 only, whose
    Serve proxy answers in the platform's shape (``front.py``; a cluster joined sets
    that in its own environment). Returns the folder of the cluster's logs on this
    machine."""
    if ray_address is None:
        env = PlatformEnv.from_environ()
        check_loopback_front(env)
        check_ray_auth(env, allow_ray_auth_disabled)
        os.environ[LOOPBACK_ENV] = "0"  # the processes that ray.init starts import Ray
        ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported it already
        os.environ[ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR] = loopback.HOOK
        os.environ.setdefault(PROXY_CALLBACK_ENV, CALLBACK)  # front.py, in Serve's proxy
    ray.init(address=ray_address, include_dashboard=False, log_to_driver=verbose,
             namespace="granikv")
    node = ray._private.worker.global_worker.node
    assert node is not None  # ray.init made or joined one
    return Path(node.get_logs_dir_path())


def check_loopback_front(env: PlatformEnv) -> None:
    """A local cluster serves on 127.0.0.1 through Serve's Python proxy. Serve's HAProxy
    mode (``RAY_SERVE_ENABLE_HA_PROXY=1``) binds HAProxy's stats and metrics ports and
    every replica's HTTP port on all interfaces, whatever ``http_options.host`` says:
    refused for a local cluster, with what to do instead."""
    if env.serve_haproxy:
        raise ValueError(
            "RAY_SERVE_ENABLE_HA_PROXY=1: Serve's HAProxy mode listens on every "
            "interface, and granikv run's local cluster listens on 127.0.0.1 only; unset "
            "it here (a cluster, `serve deploy`, can run HAProxy)")


def check_ray_auth(env: PlatformEnv, allowed: bool) -> None:
    """A local cluster runs with Ray's token auth (Ray's default for a cluster that
    ``ray.init`` starts): without it, whoever reaches 127.0.0.1 (every user of this
    machine) can call Ray's GCS and raylet, which run code, and Serve's replicas' gRPC
    servers. ``RAY_AUTH_MODE=disabled`` is refused unless ``allowed``."""
    if env.ray_auth_disabled and not allowed:
        raise ValueError(
            "RAY_AUTH_MODE=disabled: the local cluster's Ray processes and Serve's "
            "replicas would take calls, and run code, for anyone who can reach "
            "127.0.0.1 on this machine; unset RAY_AUTH_MODE (Ray then makes a token), "
            f"or pass {ALLOW_NO_AUTH_FLAG} to run without Ray's auth")


def registries(serve_file: ServeFile) -> dict[str, str]:
    """Each application's registry actor: name -> namespace."""
    return {a.config.registry_name: a.config.registry.namespace for a in serve_file.apps}


def replica_progress(apps: Mapping[str, ApplicationStatusOverview]) -> dict[str, str]:
    """``app/deployment`` -> how many of its replicas are ready (RUNNING), and how many
    are starting, from Serve's status."""
    out = {}
    for app_name, app in apps.items():
        for name, dep in app.deployments.items():
            states = {str(getattr(k, "value", k)): n for k, n in dep.replica_states.items()}
            total, ready = sum(states.values()), states.get("RUNNING", 0)
            others = ", ".join(f"{n} {k.lower()}" for k, n in sorted(states.items())
                               if k != "RUNNING" and n)
            out[f"{app_name}/{name}"] = (
                f"{ready} of {total} replica{'s' if total != 1 else ''} ready"
                + (f" ({others})" if others else "") if total else "no replica yet")
    return out


def report_changes(now: dict[str, str], seen: dict[str, str], say: Echo) -> None:
    """Say each line of ``now`` that differs from what ``seen`` holds (then holds it)."""
    for key, line in now.items():
        if seen.get(key) != line:
            say(f"{key}: {line}")
            seen[key] = line


def wait_running(names: list[str], timeout_s: float, say: Echo = print,
                 registry: Mapping[str, str] | None = None) -> None:
    """Until every application named is RUNNING, saying how its replicas come up and
    when its registry actor is there; RuntimeError with Serve's message when one fails
    to deploy."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    waiting = dict(registry or {})
    while True:
        apps = serve.status().applications
        report_changes(replica_progress({n: apps[n] for n in names if n in apps}), seen, say)
        for actor, ns in list(waiting.items()):
            if _actor_exists(actor, ns):
                say(f"registry: {actor} is up")
                del waiting[actor]
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


def _actor_exists(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


def wait_ready(root: str, name: str, deadline: float, say: Echo) -> None:
    """Until ``root/readyz`` answers 200: an LLM replica has started and reported."""
    while True:
        try:
            r = httpx.get(f"{root}/readyz", timeout=5)
            if r.status_code == 200:
                say(f"{name}: ready ({r.json().get('replicas')} LLM replica(s) reported)")
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{root}/readyz not ready in time")
        time.sleep(0.5)


def stop(files_wait_s: float = 0.0) -> None:
    """Drain and delete the applications, stop Serve and leave Ray (a cluster this
    process started stops, and its detached registry with it). Deleting an application
    first lets its requests in flight finish (each replica waits up to its
    ``graceful_shutdown_timeout_s``, and the LLM replicas then shut their engines down)
    while Serve's HTTP proxy still relays their answers; ``serve.shutdown`` alone stops
    the proxy with them. SIGINT and SIGTERM are ignored meanwhile: a second signal
    would leave Ray's processes behind. ``files_wait_s`` (a cluster this process
    started): then wait up to that long for its engines' processes to end and remove
    what files of theirs a replica cut short in its stop left (``EngineFiles``)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if threading.current_thread() is threading.main_thread():
            signal.signal(sig, signal.SIG_IGN)
    try:
        if ray.is_initialized():
            for name in _applications():
                serve.delete(name, _blocking=True)
            serve.shutdown()
    finally:
        ray.shutdown()
        if files_wait_s > 0:
            EngineFiles.remove_dead(wait_s=files_wait_s)


def _applications() -> list[str]:
    """The Serve applications running on the cluster (none when Serve did not start)."""
    from ray.serve.exceptions import RayServeException

    try:
        return list(serve.status().applications)
    except RayServeException:
        return []


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

"""The gRPC servers of a local cluster's workers on the loopback address.

A cluster that ``granikv run`` starts puts Ray's own processes on 127.0.0.1 (local.py),
but Serve 2.60's replicas start their inter-deployment gRPC server on ``[::]:0``, every
interface, whatever the node's address (``replica.py``'s ``_on_initialized``, through
``ray._common.tls_utils.add_port_to_grpc_server``); with ``RAY_AUTH_MODE=disabled`` it
answers anyone. ``setup`` runs first thing in every worker process of such a cluster
(Ray's worker-process setup hook, which local.py names in the environment of the
processes that ``ray.init`` starts) and makes a gRPC server asked for on every interface
listen on 127.0.0.1 instead. Serve's handles reach a replica at its node's address,
which on this cluster is 127.0.0.1. Private Ray symbols used:
``ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR``,
``ray._common.tls_utils.add_port_to_grpc_server``, ``ray.serve._private.replica``'s import
of it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

HOOK = "granikv_platform.loopback.setup"
LOOPBACK = "127.0.0.1"
WILDCARDS = ("[::]", "0.0.0.0", "::", "")
_USERS = ("ray.serve._private.replica",)  # modules that import the function by name


def setup() -> None:
    """Every interface -> 127.0.0.1 for the gRPC servers of this worker (once)."""
    from ray._common import tls_utils

    stock = tls_utils.add_port_to_grpc_server
    if getattr(stock, "_granikv_loopback", False):
        return
    bind = on_loopback(stock)
    tls_utils.add_port_to_grpc_server = bind
    for name in _USERS:  # imported before this hook ran (not expected: it runs first)
        module = sys.modules.get(name)
        if module is not None and getattr(module, "add_port_to_grpc_server", None) is stock:
            module.add_port_to_grpc_server = bind  # type: ignore[attr-defined]


def on_loopback(stock: Callable[[Any, str], int]) -> Callable[[Any, str], int]:
    @functools.wraps(stock)
    def add_port_to_grpc_server(server: Any, address: str) -> int:
        return stock(server, loopback_address(address))

    add_port_to_grpc_server._granikv_loopback = True  # type: ignore[attr-defined]
    return add_port_to_grpc_server


def loopback_address(address: str) -> str:
    """``[::]:0`` -> ``127.0.0.1:0``; a named host is kept."""
    host, sep, port = address.rpartition(":")
    return f"{LOOPBACK}:{port}" if sep and host in WILDCARDS else address

"""torch's ``tcp://`` rendezvous, with rank 0's store listening on the URL's address when
that address is a loopback one.

vLLM's multiprocessing executor starts its workers' process group with
``tcp://127.0.0.1:PORT`` (``get_loopback_ip()``), and rank 0 hosts torch's TCPStore
there. torch's TCPStore server listens on every interface (``::``) whatever host it is
given, and authenticates nobody: a key-value store that the workers' collectives trust,
open to the network. Only processes on this machine can use a store named by a loopback
address, so it listens on that address: a socket bound to ``(host, port)`` is handed to
``TCPStore`` (its ``master_listen_fd``), as ``torch.distributed.rendezvous`` would have
built it otherwise (multi-tenant, its libuv choice). Every other URL (another host,
rank > 0, torchelastic's agent store) goes to torch's own handler. Private torch
symbols used: ``rendezvous._rendezvous_handlers``, ``_get_use_libuv_from_query_dict``,
``_torchelastic_use_agent_store`` (listed in ``patches.INTERNALS``).
"""

from __future__ import annotations

import importlib
import ipaddress
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

Rendezvous = Iterator[tuple[Any, int, int]]  # (store, rank, world size), torch's shape


def _rendezvous() -> Any:
    """torch's rendezvous module (``torch.distributed.rendezvous`` is also a function)."""
    return importlib.import_module("torch.distributed.rendezvous")


def install() -> None:
    """Replace torch's ``tcp`` rendezvous handler (once per process)."""
    rendezvous = _rendezvous()
    stock = rendezvous._rendezvous_handlers["tcp"]
    if getattr(stock, "_granikv_loopback", False):
        return
    handler = loopback_handler(stock)
    handler._granikv_loopback = True  # type: ignore[attr-defined]
    rendezvous._rendezvous_handlers["tcp"] = handler


def loopback_handler(stock: Callable[..., Rendezvous]) -> Callable[..., Rendezvous]:
    def handler(url: str, timeout: timedelta = timedelta(minutes=30),
                **kwargs: Any) -> Rendezvous:
        parsed = urlparse(url)
        query = dict(q.split("=", 1) for q in parsed.query.split("&") if "=" in q)
        if not _hosts_loopback_store(parsed.hostname, parsed.port, query):
            yield from stock(url, timeout, **kwargs)
            return
        assert parsed.hostname is not None and parsed.port is not None
        world_size = int(query["world_size"])
        yield (loopback_store(parsed.hostname, parsed.port, world_size, timeout, query),
               0, world_size)
        raise RuntimeError("Unable to perform re-rendezvous using tcp:// method")

    return handler


def _hosts_loopback_store(host: str | None, port: int | None,
                          query: dict[str, str]) -> bool:
    """This process would host the store (rank 0, no agent store) at a loopback IP."""
    if host is None or port is None or query.get("rank") != "0" or "world_size" not in query:
        return False
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: torch resolves it
        return False
    return loopback and not _rendezvous()._torchelastic_use_agent_store()


def loopback_store(host: str, port: int, world_size: int, timeout: timedelta,
                   query: dict[str, str]) -> Any:
    """Rank 0's TCPStore, listening on ``host:port`` only."""
    from torch.distributed import TCPStore

    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    # The store owns the descriptor from here (it closes it when it is destroyed).
    return TCPStore(host, port, world_size, True, timeout, multi_tenant=True,
                    master_listen_fd=sock.detach(),
                    use_libuv=_rendezvous()._get_use_libuv_from_query_dict(query))

"""The run service's handle, as the LLM replicas' routes find it (``ing.services``)."""

from __future__ import annotations

from typing import Any

from granikv_platform.errors import ApiError

SERVICE_NAME = "agents"  # its name in config.services


def service(ing: Any) -> Any:
    found = getattr(ing, "services", {}).get(SERVICE_NAME)
    if found is None:
        raise ApiError(503, f"the agents service is not deployed: add a service named "
                       f"{SERVICE_NAME!r} to the app's config.services")
    return found

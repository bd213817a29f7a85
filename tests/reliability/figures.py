"""The measured figures of the reliability tests, written as they run.

Each test merges one section into a small JSON file (``GRANIKV_FIGURES``, default
``runs/reliability/figures.json``, git-ignored): inputs tried, faults injected, requests
served, slots leaked. docs/reliability.md quotes a copy of that file
(docs/reliability.json) and gives the command that rewrites it. The figures are counted
by the tests themselves; a test that fails records nothing after its failing line.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "runs" / "reliability" / "figures.json"


def path() -> Path:
    return Path(os.environ.get("GRANIKV_FIGURES") or DEFAULT)


def record(section: str, **values: Any) -> None:
    """Merge ``values`` into ``section`` of the figures file (one writer: the pytest
    process)."""
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("machine", {"python": platform.python_version(),
                                "cpus": os.cpu_count(), "system": platform.system()})
    data[section] = {**values, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(p)

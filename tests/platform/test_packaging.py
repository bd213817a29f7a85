"""pyproject.toml states compatible ranges; requirements/ pins the exact versions CI and
``make install`` use, and every pin lies in its range. Neither names a machine's paths."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
REQS = REPO / "requirements"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def pins() -> dict[str, str]:
    """name -> exact version, over every requirements file (constraints included)."""
    out: dict[str, str] = {}
    for path in sorted(REQS.glob("*.txt")):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line and not line.startswith("-"):
                req = Requirement(line)
                out[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return out


def declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"].values()
    return [Requirement(r) for r in [*project["dependencies"], *(r for e in extras for r in e)]]


@pytest.mark.parametrize("req", declared(), ids=str)
def test_each_dependency_is_a_range_that_admits_its_pin(req: Requirement) -> None:
    assert not any(s.operator == "==" for s in req.specifier), f"{req}: a range, not a pin"
    assert any(s.operator == "<" for s in req.specifier), f"{req}: needs an upper bound"
    pinned = pins().get(canonicalize_name(req.name))
    assert pinned is not None, f"{req.name} has no exact pin in requirements/"
    assert req.specifier.contains(pinned, prereleases=True), f"{req} excludes {pinned}"


def test_install_files_name_no_path_outside_the_repository() -> None:
    """What installs the project reads only the project: no absolute path, no path that
    leaves the repository."""
    outside = re.compile(r"(?:^|[\s='\"(])(?:/(?:tmp|opt|home|work|root|usr)/|\.\./)")
    for path in [REPO / "pyproject.toml", REPO / "Makefile", *REQS.glob("*.txt")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not outside.search(line), f"{path.name}:{n} names a path outside: {line}"

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


def names(path: Path) -> set[str]:
    return {canonicalize_name(Requirement(ln.split("#")[0]).name)
            for ln in path.read_text().splitlines()
            if ln.split("#")[0].strip() and not ln.startswith("-")}


def test_test_only_packages_are_in_dev_txt_not_in_what_the_image_installs() -> None:
    """gpu.txt (the image's) and cpu.txt hold what the platform runs; dev.txt holds the
    dev extra exactly, and both make install paths install it for the tests."""
    dev = {canonicalize_name(Requirement(r).name)
           for r in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    runtime = {canonicalize_name(Requirement(r).name) for key in ("gpu", "serve", "agents")
               for r in PYPROJECT["project"]["optional-dependencies"][key]}
    for name in ("cpu.txt", "gpu.txt"):
        leaked = names(REQS / name) & (dev - runtime)
        assert not leaked, f"{name} installs test-only {sorted(leaked)}"
    assert dev <= names(REQS / "dev.txt") and "pgserver" in dev
    install = (REPO / "Makefile").read_text().split("\n$(STAMP):")[1].split("\ntest:")[0]
    assert install.count("-r requirements/dev.txt") == 2, install  # the GPU and CPU paths
    assert "requirements/gpu.txt" in (REPO / "deploy" / "Dockerfile").read_text()
    assert "dev.txt" not in (REPO / "deploy" / "Dockerfile").read_text()
    assert "make install" in (REPO / ".ci" / "run").read_text()

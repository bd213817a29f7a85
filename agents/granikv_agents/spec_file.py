"""Team spec files (``deploy/teams/*.yaml``): the only YAML reader of the agents layer.

``context_file`` in a spec is relative to the spec file's folder. Errors name a spec
(its name, its file's name), never a folder: a team may read them.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from granikv_agents.spec import TeamSpec
from granikv_platform.names import TEAM_RE
from granikv_platform.protocol import validation_message

SPEC_NAME_RE = TEAM_RE  # a spec file is named like a team


class SpecFileError(ValueError):
    """A spec file that is missing, is not YAML, or does not validate."""


def load_spec(path: str | Path) -> TeamSpec:
    """The errors name the file, not its folder (they may reach a team)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise SpecFileError(f"{path.name}: {e.strerror or type(e).__name__}") from e
    except yaml.YAMLError as e:
        raise SpecFileError(f"{path.name}: not YAML: {e}") from e
    try:
        return TeamSpec.model_validate(doc, context={"base_dir": path.resolve().parent})
    except ValidationError as e:
        raise SpecFileError(f"{path.name}: {_lines(e)}") from e


def find_spec(folder: str | Path, name: str) -> TeamSpec:
    """``{folder}/{name}.yaml`` (a name, never a path)."""
    if not SPEC_NAME_RE.match(name):
        raise SpecFileError(f"spec name {name!r} must match {SPEC_NAME_RE.pattern}")
    path = Path(folder) / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no team spec {name!r}")
    return load_spec(path)


def spec_names(folder: str | Path) -> list[str]:
    return sorted(p.stem for p in Path(folder).glob("*.yaml") if SPEC_NAME_RE.match(p.stem))


def _lines(e: ValidationError) -> str:
    return validation_message(e)

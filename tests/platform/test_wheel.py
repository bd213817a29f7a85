"""The built wheel works outside the checkout: built with pip, installed (--no-deps) in a
fresh virtual environment that borrows this environment's packages (no download), and
``granikv validate`` run from a folder that is not the checkout, on the configs and the
tiny model shipped as package data; the agents service's team specs found there too."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout


Installed = tuple[Path, Path, dict[str, str]]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The repository's wheel installed in a fresh venv: its python, its site-packages,
    and the environment to run it with."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GRANIKV_CONFIG", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    src = tmp_path / "src"  # a copy: the build's own folders stay out of the checkout
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "runs", "*.egg-info", "__pycache__", ".*_cache"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("granikv-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    py = venv / "bin" / "python"
    own = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   tmp_path, env).strip())
    # This environment's third-party packages, after the venv's own (a path line in a
    # .pth file: its own .pth files, such as a checkout's editable install, are not read).
    (own / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
         str(wheel)], tmp_path, env)
    where = run([str(py), "-c", "import granikv_platform, granikv_engine, granikv_agents; "
                 "print(granikv_platform.__file__, granikv_engine.__file__)"], tmp_path, env)
    assert str(REPO) not in where and str(own) in where, where
    return py, own, env


def test_the_wheel_validates_its_packaged_configs_outside_the_checkout(
        installed: Installed, tmp_path: Path) -> None:
    py, own, env = installed
    venv = py.parent.parent
    data = own / "granikv_platform" / "deploy"
    assert (data / "models" / "tiny-llama" / "tokenizer.json").is_file()
    assert (data / "teams" / "review.yaml").is_file() and (data / "contexts" / "red.md").is_file()
    # deploy/local.yaml is not in tmp_path: found in the package data, with its tiny model
    # and blue's context file (one validation: each imports vLLM and Ray, ~20 s).
    out = run([str(venv / "bin" / "granikv"), "validate", "deploy/local.yaml"], tmp_path, env)
    assert "\ngranikv: tiny-llama on cpu, TP 1" in out, out


# Run in the installed venv: every team of the KubeRay manifest gets its assistants from
# the agents service's specs_dir, resolved as the service resolves it.
LIST_ASSISTANTS = """
from granikv_agents.schemas import AgentsOptions
from granikv_agents.spec_file import load_spec, spec_names
from granikv_platform.loader import load_serve_config

for app in load_serve_config("deploy/kuberay/rayservice.yaml").apps:
    (svc,) = [s for s in app.config.services if s.name == "agents"]
    folder = AgentsOptions.model_validate(svc.options).specs_folder()
    specs = {n: load_spec(folder / f"{n}.yaml") for n in spec_names(folder)}
    for team in app.config.teams:
        names = sorted(n for n, s in specs.items() if s.team == team.name)
        print("assistants", folder, team.name, ",".join(names))
"""


def test_the_wheel_lists_the_manifests_assistants_outside_the_checkout(
        installed: Installed, tmp_path: Path) -> None:
    py, own, env = installed
    out = run([str(py), "-c", LIST_ASSISTANTS], tmp_path, env, timeout=300)
    rows = [line.split(" ")[1:] for line in out.splitlines() if line.startswith("assistants ")]
    assert {team: names for _, team, names in rows} == {
        "reviewers": "code-review", "planners": "release-plan"}, out
    assert (own / "granikv_platform" / "deploy" / "gpu-teams" / "debate-panel.yaml").is_file()
    assert all(folder.startswith(str(own)) for folder, _, _ in rows), out

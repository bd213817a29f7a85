"""The built wheel works outside the checkout: built with pip, installed (--no-deps) in a
fresh virtual environment that borrows this environment's packages (no download), and
``granikv validate`` run from a folder that is not the checkout, on the configs and the
tiny model shipped as package data."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_wheel_validates_its_packaged_configs_outside_the_checkout(tmp_path: Path) -> None:
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
    data = own / "granikv_platform" / "deploy"
    assert (data / "models" / "tiny-llama" / "tokenizer.json").is_file()
    assert (data / "teams" / "review.yaml").is_file() and (data / "contexts" / "red.md").is_file()
    # deploy/local.yaml is not in tmp_path: found in the package data, with its tiny model
    # and blue's context file (one validation: each imports vLLM and Ray, ~20 s).
    out = run([str(venv / "bin" / "granikv"), "validate", "deploy/local.yaml"], tmp_path, env)
    assert "\ngranikv: tiny-llama on cpu, TP 1" in out, out

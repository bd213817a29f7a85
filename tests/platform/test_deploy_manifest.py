"""The Kubernetes deployment files: the RayService's serveConfigV2 is what Ray's schema
accepts and the platform builds, and the manifest keeps the promises its comments make
(see deploy/kuberay/rayservice.yaml); the image is built on the Ray version pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from granikv_platform.loader import load_serve_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFEST = DEPLOY / "kuberay" / "rayservice.yaml"


def manifest() -> dict[str, Any]:
    return yaml.safe_load(MANIFEST.read_text())  # type: ignore[no-any-return]


def pods(m: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = m["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [g["template"]["spec"] for g in groups]


def mounted_under(pod: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volume of ``pod`` whose mount holds ``path``."""
    for c in pod["containers"]:
        for mount in c.get("volumeMounts", []):
            if path.startswith(mount["mountPath"].rstrip("/") + "/"):
                return next(v for v in pod["volumes"] if v["name"] == mount["name"])
    return None


def test_serve_config_v2_passes_rays_schema_and_builds() -> None:
    from ray.serve.schema import ServeDeploySchema

    from granikv_platform.builder import build_app

    ServeDeploySchema.model_validate(yaml.safe_load(manifest()["spec"]["serveConfigV2"]))
    for app in load_serve_config(MANIFEST).apps:
        build_app(app.config)


def test_no_deprecated_fields_and_autoscaling_where_bounds_are_set() -> None:
    assert "UnhealthySecondThreshold" not in MANIFEST.read_text()
    m = manifest()
    cluster = m["spec"]["rayClusterConfig"]
    if any("minReplicas" in g or "maxReplicas" in g for g in cluster["workerGroupSpecs"]):
        assert cluster.get("enableInTreeAutoscaling") is True
    # One cluster per SQLite file: no second cluster during an upgrade.
    assert m["spec"]["upgradeStrategy"]["type"] == "None"


def test_secrets_are_readable_by_the_ray_user_and_hf_token_is_one() -> None:
    for pod in pods(manifest()):
        secrets = [v for v in pod["volumes"] if "secret" in v]
        assert secrets and all(v["secret"]["defaultMode"] == 0o440 for v in secrets)
        assert pod["securityContext"]["fsGroup"] == 100  # the Ray image's group (users)
        for c in pod["containers"]:
            env = {e["name"]: e for e in c.get("env", [])}
            assert "secretKeyRef" in env["HF_TOKEN"]["valueFrom"], c["name"]


def test_state_files_are_on_a_volume_every_pod_mounts() -> None:
    m = manifest()
    claims = {d["metadata"]["name"]: d for d in
              yaml.safe_load_all((DEPLOY / "kuberay" / "storage.yaml").read_text())}
    for app in load_serve_config(MANIFEST).apps:
        paths = [app.config.registry.state_path, *(s.options.get("store_path")
                                                    for s in app.config.services)]
        for path in paths:
            assert path is not None
            for pod in pods(m):
                volume = mounted_under(pod, path)
                assert volume is not None, (path, pod["containers"][0]["name"])
                claim = claims[volume["persistentVolumeClaim"]["claimName"]]
                assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_image_is_built_on_the_pinned_ray() -> None:
    pins = (DEPLOY.parent / "requirements" / "gpu.txt").read_text()
    (ray,) = [ln.split("==")[1] for ln in pins.splitlines() if ln.startswith("ray[serve]==")]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray}-py311-gpu" in dockerfile
    images = {c["image"] for pod in pods(manifest()) for c in pod["containers"]}
    assert images == {"granikv/platform:0.1.0-gpu"} and "granikv/platform:0.1.0-gpu" in \
        MANIFEST.read_text().split("docker build")[1].splitlines()[0]

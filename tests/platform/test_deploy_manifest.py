"""The Kubernetes deployment files: the RayService's serveConfigV2 is what Ray's schema
accepts and the platform builds, and the manifest keeps the promises its comments make
(see deploy/kuberay/rayservice.yaml); the image is built on the Ray version pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from granikv_agents.schemas import AgentsOptions
from granikv_agents.spec_file import load_spec, spec_names
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


def references(node: Any) -> set[tuple[str, str]]:
    """Every (kind, name) of a claim, Secret or ConfigMap that ``node`` refers to."""
    keys = {("persistentVolumeClaim", "claimName"): "PersistentVolumeClaim",
            ("secret", "secretName"): "Secret", ("secretKeyRef", "name"): "Secret",
            ("secretRef", "name"): "Secret", ("configMap", "name"): "ConfigMap",
            ("configMapKeyRef", "name"): "ConfigMap", ("configMapRef", "name"): "ConfigMap"}
    out: set[tuple[str, str]] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            for (field, name_key), kind in keys.items():
                if k == field and isinstance(v, dict) and name_key in v:
                    out.add((kind, v[name_key]))
            out |= references(v)
    elif isinstance(node, list):
        for v in node:
            out |= references(v)
    return out


def test_every_claim_secret_and_config_map_is_defined_or_yours_to_create() -> None:
    """A pod whose volume's claim exists nowhere never schedules: each reference is
    defined in deploy/kuberay/ or made by a command in the manifest's header."""
    defined = {(d["kind"], d["metadata"]["name"]) for p in sorted((DEPLOY / "kuberay").glob(
        "*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d}
    header = [ln for ln in MANIFEST.read_text().splitlines() if ln.startswith("#")]
    documented = {("Secret", m.split()[0]) for ln in header
                  for m in ln.split("kubectl create secret generic ")[1:]}
    refs = references(manifest())
    assert ("PersistentVolumeClaim", "granikv-models") in refs
    missing = refs - defined - documented
    assert not missing, f"referenced, defined nowhere: {sorted(missing)}"


def test_worker_pods_are_ready_when_the_app_is() -> None:
    """Workers serve traffic through their Serve proxy: ready = the app's /readyz there.
    The head keeps KubeRay's probes (the operator deploys the app once the head is
    ready, so /readyz there would wait for itself)."""
    (app,) = load_serve_config(MANIFEST).apps
    cluster = manifest()["spec"]["rayClusterConfig"]
    for group in cluster["workerGroupSpecs"]:
        (c,) = group["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        probe = c["readinessProbe"]["httpGet"]
        assert probe["path"] == f"{app.route_prefix.rstrip('/')}/readyz"
        assert ports[probe["port"]] == yaml.safe_load(
            manifest()["spec"]["serveConfigV2"])["http_options"]["port"]
        assert "livenessProbe" not in c  # KubeRay's: the node's health, not the app's
    (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert "readinessProbe" not in head and "livenessProbe" not in head


def test_ray_endpoints_on_the_pod_address_need_a_token() -> None:
    cluster = manifest()["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"].get("dashboard-host") == "0.0.0.0"
    assert cluster["authOptions"] == {"mode": "token"}


def test_every_team_of_the_gpu_configs_has_its_assistants() -> None:
    """The threads API lists the spec files of the agents service's specs_dir whose team
    is the caller's: each team of the manifest and of serve_config.yaml has one."""
    apps = [*load_serve_config(MANIFEST).apps,
            *load_serve_config(DEPLOY / "serve_config.yaml").apps]
    assert len(apps) == 3
    for app in apps:
        (svc,) = [s for s in app.config.services if s.name == "agents"]
        folder = AgentsOptions.model_validate(svc.options).specs_folder()
        teams = {load_spec(folder / f"{n}.yaml").team for n in spec_names(folder)}
        assert {t.name for t in app.config.teams} <= teams, (app.name, folder, teams)

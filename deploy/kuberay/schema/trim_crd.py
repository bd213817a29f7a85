"""KubeRay's RayService CRD -> the JSON schema that tests/platform/test_manifest_schemas.py
checks deploy/kuberay/rayservice.yaml against.

    python deploy/kuberay/schema/trim_crd.py ray.io_rayservices.yaml v1.7.0 \
        > deploy/kuberay/schema/rayservice-v1.json

The CRD is ray-operator/config/crd/bases/ray.io_rayservices.yaml of the KubeRay release
named (about 1 MB, most of it Kubernetes' PodTemplateSpec written out once per pod
group). Kept: the v1 schema without descriptions; each pod ``template`` becomes an open
object, because the test checks the templates against Kubernetes' own PodTemplateSpec schema
(kubernetes-validate's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def trim(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: trim(v) for k, v in node.items() if k != "description"}
        props = out.get("properties")
        if isinstance(props, dict) and "template" in props and "spec" in props["template"].get(
                "properties", {}):
            props["template"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return out
    if isinstance(node, list):
        return [trim(v) for v in node]
    return node


def main(path: str, release: str) -> None:
    crd = yaml.safe_load(Path(path).read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = trim(v1["schema"]["openAPIV3Schema"])
    json.dump({"x-source": f"KubeRay {release}, {path.rsplit('/', 1)[-1]}", **schema},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

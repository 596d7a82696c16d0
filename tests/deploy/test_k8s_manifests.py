"""Every Kubernetes object we ship, base (deploy/k8s) and Sentinel overlay
(deploy/k8s-sentinel), validates against Kubernetes 1.37's OpenAPI schemas in strict mode (no
unknown field), offline: kubernetes-validate ships the schemas. The overlay is rendered here as
kustomize does for what it uses (the base's resources plus its own, its strategic-merge
ConfigMap patch, the base's labels); where kubectl is on PATH, `kubectl kustomize` renders both
too, is validated as well and must agree with ours. The references between objects (selectors,
ports, probes, envFrom) are test_deploy_consistency's.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
SENTINEL = DEPLOY / "k8s-sentinel"
KUBERNETES = "1.37.0"

Doc = dict[str, Any]


def _load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _merge(base: Any, patch: Any) -> Any:
    """Strategic merge as kustomize applies it to maps (a ConfigMap's data, metadata): keys of
    the patch replace or add, maps merge; lists are replaced (none of our patches touch one)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base.get(key), value) if key in base else value
        return merged
    return copy.deepcopy(patch)


def _identity(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def render(directory: Path) -> list[Doc]:
    """The objects `kubectl kustomize directory` gives, for the features our kustomizations
    use (resources, patches by path, labels without selectors); anything else fails here."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "resources", "patches", "labels"}
    assert set(kustomization) <= known, set(kustomization) - known
    docs: list[Doc] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        if path.is_dir():
            # kustomize's own rule ("cycle detected"): a base may not contain its overlay.
            assert not directory.resolve().is_relative_to(path), f"{directory} is inside {path}"
            docs += render(path)
        else:
            docs += _load(path)
    for patch_entry in kustomization.get("patches", []):
        assert set(patch_entry) == {"path"}, patch_entry  # strategic merge, target by identity
        for patch in _load(directory / patch_entry["path"]):
            targets = [i for i, doc in enumerate(docs) if _identity(doc) == _identity(patch)]
            assert len(targets) == 1, f"patch {_identity(patch)} matches {len(targets)} objects"
            docs[targets[0]] = _merge(docs[targets[0]], patch)
    for label in kustomization.get("labels", []):
        assert not label.get("includeSelectors") and not label.get("includeTemplates"), label
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
    return docs


KUSTOMIZATIONS = [K8S, SENTINEL]


def _ids(directory: Path) -> str:
    return str(directory.relative_to(DEPLOY))


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_ids)
def test_every_object_validates_strictly_against_kubernetes_schemas(directory: Path) -> None:
    docs = render(directory)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_every_manifest_file_is_in_a_kustomization() -> None:
    """A file no kustomization lists would be shipped and never validated (nor applied)."""
    listed = {path for directory in KUSTOMIZATIONS for path in _listed_files(directory)}
    shipped = {path.resolve() for directory in KUSTOMIZATIONS for path in directory.rglob("*.yaml")
               if path.name != "kustomization.yaml"}
    assert shipped == listed, shipped ^ listed


def _listed_files(directory: Path) -> set[Path]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    entries = kustomization.get("resources", []) + [
        patch["path"] for patch in kustomization.get("patches", [])]
    return {(directory / entry).resolve() for entry in entries
            if not (directory / entry).is_dir()}


def test_strict_validation_rejects_what_kubernetes_would() -> None:
    """The validator is not a formality: a misspelt field (strict) and a wrong type fail."""
    deployment = next(doc for doc in render(K8S) if doc["kind"] == "Deployment")
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBERNETES, strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBERNETES, strict=True)


def test_the_overlay_points_the_proxies_at_the_sentinels() -> None:
    config = next(doc for doc in render(SENTINEL)
                  if _identity(doc) == ("ConfigMap", "responses-proxy"))
    base = next(doc for doc in render(K8S) if _identity(doc) == ("ConfigMap", "responses-proxy"))
    assert config["data"]["PROXY_REDIS_URL"].startswith("redis+sentinel://")
    # The patch adds and replaces; every other setting of the base stays.
    assert set(base["data"]) <= set(config["data"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_ids)
def test_kubectl_kustomize_renders_the_same_valid_objects(directory: Path) -> None:
    result = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True,
                            text=True, timeout=60, check=True)
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    for doc in rendered:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    ours = {_identity(doc): doc for doc in render(directory)}
    theirs = {_identity(doc): doc for doc in rendered}
    assert set(ours) == set(theirs)
    for identity, doc in theirs.items():
        assert doc == ours[identity], identity

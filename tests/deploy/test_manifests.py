"""The Kubernetes manifests under deploy/k8s: render, validate, check invariants.

Every kustomization is rendered with ``kubectl kustomize`` (kubectl must be
installed: a missing kubectl fails these tests) and every object is validated
offline, strictly (unknown fields are errors), against the Kubernetes JSON
schemas bundled with the pinned ``kubernetes-validate`` package, for the oldest
supported and the newest bundled Kubernetes version.
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.deploy.support import (
    CTXWARDEN_UID,
    DOCKERFILE,
    EXPECTED_KUSTOMIZATIONS,
    GRPC_PORT,
    LONG_RUNNING_KINDS,
    METRICS_PORT,
    OLDEST_KUBERNETES,
    SECRET_NAME,
    by_kind,
    check_ctxwarden_args,
    containers,
    flag_value,
    healthcheck_code,
    image_tag,
    is_ctxwarden,
    known_env_vars,
    kubectl,
    kustomization_dirs,
    kustomize_version,
    matches,
    one,
    pod_template,
    render,
    setting_keys,
    workloads,
)

KUSTOMIZATIONS = kustomization_dirs()
VERSIONS = ("oldest", "newest")


def _kubernetes_version(which: str) -> str:
    import kubernetes_validate

    return OLDEST_KUBERNETES if which == "oldest" else kubernetes_validate.latest_version()


def _all_containers(
    kdir: str,
) -> list[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    """(label, workload, role, container) for every container the kustomization renders."""
    return [
        (f"{kdir}: {obj['kind']}/{obj['metadata']['name']}/{c['name']}", obj, role, c)
        for obj in workloads(render(kdir))
        for role, c in containers(pod_template(obj)["spec"])
    ]


def _problems(checks: list[tuple[bool, str]]) -> list[str]:
    return [message for ok, message in checks if not ok]


def _ctxwarden_pods(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, ctxwarden container) pairs."""
    return [
        (obj, c)
        for obj in workloads(objects)
        for _, c in containers(pod_template(obj)["spec"])
        if is_ctxwarden(c)
    ]


def _serve(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (workload, container) running `ctxwarden serve`."""
    found = [(o, c) for o, c in _ctxwarden_pods(objects) if c.get("args", [""])[0] == "serve"]
    assert len(found) == 1, f"expected one ctxwarden serve container, got {len(found)}"
    return found[0]


# -- tooling ---------------------------------------------------------------------


def test_kubectl_is_installed_with_a_current_kustomize() -> None:
    kubectl()
    assert kustomize_version() >= (5, 0), (
        f"kubectl's kustomize is v{'.'.join(map(str, kustomize_version()))}; "
        "the manifests need kustomize v5 (kubectl >= 1.27)"
    )


def test_every_expected_kustomization_exists() -> None:
    assert set(EXPECTED_KUSTOMIZATIONS) <= set(KUSTOMIZATIONS), KUSTOMIZATIONS


# -- schema validation --------------------------------------------------------------


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_objects_validate_offline(
    kdir: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes_validate

    version = _kubernetes_version(version)
    objects = render(kdir)
    assert objects, f"{kdir} renders nothing"

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("schema validation tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kdir}: {name} is invalid for Kubernetes {version}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{kdir}: {name}: {exc.message}")


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_every_object_is_labelled(kdir: str) -> None:
    for obj in render(kdir):
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of"), (
            f"{obj['kind']}/{obj['metadata']['name']} has no app.kubernetes.io/part-of label"
        )


# -- every container -----------------------------------------------------------------
# Containers are found by rendering, so these tests are parametrized by
# kustomization (collection never needs kubectl) and report every offending
# container at once.


def _lockdown_problems(obj: dict[str, Any], container: dict[str, Any]) -> list[str]:
    pod = pod_template(obj)["spec"]
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})

    def effective(key: str) -> Any:
        return sc.get(key, pod_sc.get(key))

    uid = effective("runAsUser")
    caps = sc.get("capabilities", {})
    checks = [
        (effective("runAsNonRoot") is True, "runAsNonRoot is not true"),
        (isinstance(uid, int) and uid > 0, f"runAsUser {uid!r} is not a non-zero numeric UID"),
        (sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem is not true"),
        (sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not false"),
        (sc.get("privileged", False) is False, "privileged"),
        ("ALL" in caps.get("drop", []), "capabilities do not drop ALL"),
        (not caps.get("add"), "capabilities are added"),
        (
            effective("seccompProfile") == {"type": "RuntimeDefault"},
            "seccomp is not RuntimeDefault",
        ),
        (
            pod_sc.get("seccompProfile") == {"type": "RuntimeDefault"},
            "pod seccomp not RuntimeDefault",
        ),
        (pod_sc.get("runAsNonRoot") is True, "pod runAsNonRoot is not true"),
        (
            not (pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC")),
            "host namespaces",
        ),
        (pod.get("automountServiceAccountToken") is False, "service account token is mounted"),
    ]
    if is_ctxwarden(container):
        checks.append((uid == CTXWARDEN_UID, f"ctxwarden must run as UID {CTXWARDEN_UID}"))
        checks.append((effective("runAsGroup") == CTXWARDEN_UID, "ctxwarden GID is not 10001"))
    return _problems(checks)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_every_container_is_locked_down(kdir: str) -> None:
    problems = [
        f"{label}: {p}"
        for label, obj, _, c in _all_containers(kdir)
        for p in _lockdown_problems(obj, c)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_every_container_has_resources_and_a_pinned_image(kdir: str) -> None:
    problems = []
    for label, _, _, c in _all_containers(kdir):
        resources = c.get("resources", {})
        for bound in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if not resources.get(bound, {}).get(resource):
                    problems.append(f"{label}: no resources.{bound}.{resource}")
        image = c["image"]
        tag = image_tag(image)
        if not tag and "@sha256:" not in image:
            problems.append(f"{label}: image {image!r} is not pinned by tag or digest")
        if tag == "latest":
            problems.append(f"{label}: image {image!r} uses the latest tag")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_every_long_running_container_has_probes(kdir: str) -> None:
    problems = []
    for label, obj, role, c in _all_containers(kdir):
        if obj["kind"] not in LONG_RUNNING_KINDS or role == "init":
            continue  # run to completion: probes do not apply
        for probe in ("livenessProbe", "readinessProbe"):
            if not c.get(probe):
                problems.append(f"{label}: no {probe}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_ctxwarden_containers_run_valid_commands(kdir: str) -> None:
    cases = [case for case in _all_containers(kdir) if is_ctxwarden(case[3])]
    assert cases, f"{kdir} runs no ctxwarden container"
    for label, obj, _, c in cases:
        assert "command" not in c, f"{label}: keep the image's ENTRYPOINT (ctxwarden)"
        check_ctxwarden_args(c.get("args", []))
        env_names = {e["name"] for e in c.get("env", [])}
        unknown = {n for n in env_names if n.startswith("CTXWARDEN_")} - known_env_vars()
        assert not unknown, f"{label}: ctxwarden reads no such environment variables: {unknown}"
        spec = pod_template(obj)["spec"]
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        assert "/tmp" in mounts, f"{label}: a read-only root needs a writable /tmp"
        assert "emptyDir" in volumes[mounts["/tmp"]], f"{label}: /tmp is not an emptyDir"
        assert spec.get("enableServiceLinks") is False, (
            f"{label}: service links inject CTXWARDEN_* variables for a Service named ctxwarden"
        )


# -- ctxwarden's probes: gRPC health ---------------------------------------------------


@pytest.mark.parametrize("kdir", ["base", "overlays/dev-mysql", "examples/sidecar"])
def test_ctxwarden_probes_use_grpc_health(kdir: str) -> None:
    _, c = _serve(render(kdir))
    listen = flag_value(c["args"], "--listen")
    assert listen, "serve without --listen would bind 127.0.0.1"
    host, port = listen.rsplit(":", 1)
    probes = [c.get(p) for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert all(probes[1:]), "liveness and readiness probes are required"
    for probe in filter(None, probes):
        if host.startswith("127.") or host in {"localhost", "[::1]"}:
            # The kubelet probes the pod IP, which a loopback listener never
            # answers: the check must run inside the container.
            assert probe.get("exec", {}).get("command") == [
                "python",
                "-c",
                healthcheck_code(DOCKERFILE.read_text()),
            ], "a loopback sidecar needs the image's gRPC health one-liner as an exec probe"
        else:
            assert probe.get("grpc", {}).get("port") == int(port) == GRPC_PORT, probe
    ready = c["readinessProbe"]
    if "grpc" in ready:
        assert ready["grpc"].get("service", "") in {"", "ctxwarden.v1.ContextService"}


# -- base: the shared service -------------------------------------------------------------


def test_base_deployment_shape() -> None:
    objects = render("base")
    deploy, c = _serve(objects)
    assert deploy["kind"] == "Deployment"
    assert deploy["spec"]["replicas"] >= 2
    assert deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    template = deploy["spec"]["template"]
    assert matches(deploy["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    args = c["args"]
    assert flag_value(args, "--listen") == f"0.0.0.0:{GRPC_PORT}"
    assert flag_value(args, "--metrics-listen") == f"0.0.0.0:{METRICS_PORT}"
    # Non-loopback listening needs authentication, never the escape hatch.
    assert flag_value(args, "--api-keys-file") or flag_value(args, "--jwt-jwks-file")
    assert "--insecure-allow-unauthenticated" not in args
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": GRPC_PORT, "metrics": METRICS_PORT}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_base_references_the_secret_without_defining_it() -> None:
    objects = render("base")
    assert not by_kind(objects, "Secret"), "the base must not carry secret values"
    _, c = _serve(objects)
    env = {e["name"]: e for e in c["env"]}
    ref = env["CTXWARDEN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": SECRET_NAME, "key": "database-url"}
    deploy, _ = _serve(objects)
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    secret_volumes = [v["secret"] for v in volumes.values() if "secret" in v]
    assert [v["secretName"] for v in secret_volumes] == [SECRET_NAME]
    mounted = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    secret_volume = next(n for n, v in volumes.items() if "secret" in v)
    items = {i["key"]: i["path"] for i in volumes[secret_volume]["secret"]["items"]}
    api_keys_file = f"{mounted[secret_volume]}/{items['api-keys']}"
    assert flag_value(c["args"], "--api-keys-file") == api_keys_file


def test_base_config_toml_is_mounted_and_uses_known_settings() -> None:
    objects = render("base")
    deploy, c = _serve(objects)
    config_maps = by_kind(objects, "ConfigMap")
    assert len(config_maps) == 1
    cm = config_maps[0]
    config = tomllib.loads(cm["data"]["config.toml"])
    unknown = set(config) - setting_keys()
    assert not unknown, f"config.toml keys that are not ctxwarden serve settings: {unknown}"
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    cm_volume = next(n for n, v in volumes.items() if "configMap" in v)
    assert volumes[cm_volume]["configMap"]["name"] == cm["metadata"]["name"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == cm_volume)
    path = mount["mountPath"] if mount.get("subPath") else f"{mount['mountPath']}/config.toml"
    assert flag_value(c["args"], "--config") == path


@pytest.mark.parametrize("kdir", ["base", "overlays/dev-mysql"])
def test_pdb_selects_the_deployment_pods(kdir: str) -> None:
    objects = render(kdir)
    deploy, _ = _serve(objects)
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    pdb = one(objects, "PodDisruptionBudget", "ctxwarden")
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert matches(selector, pod_labels)
    assert selector == deploy["spec"]["selector"]["matchLabels"]
    replicas = deploy["spec"]["replicas"]
    if "minAvailable" in pdb["spec"]:
        assert 0 < pdb["spec"]["minAvailable"] < replicas, "the PDB would block every drain"
    else:
        assert 0 < pdb["spec"]["maxUnavailable"] < replicas
    # The migration Job's pods must not count towards the budget or the Service.
    for job in by_kind(objects, "Job"):
        assert not matches(selector, job["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("kdir", ["base", "overlays/dev-mysql"])
def test_services_target_named_ports_of_the_selected_pods(kdir: str) -> None:
    objects = render(kdir)
    pods = [pod_template(o) for o in workloads(objects)]
    services = by_kind(objects, "Service")
    assert services
    for svc in services:
        selected = [p for p in pods if matches(svc["spec"]["selector"], p["metadata"]["labels"])]
        assert selected, f"Service {svc['metadata']['name']} selects no pods"
        for port in svc["spec"]["ports"]:
            target = port["targetPort"]
            assert isinstance(target, str), "target a named port, not a number"
            for pod in selected:
                names = {
                    p["name"]: p["containerPort"]
                    for _, c in containers(pod["spec"])
                    for p in c.get("ports", [])
                }
                assert target in names, f"{svc['metadata']['name']}: no container port {target}"
                assert names[target] == port["port"]
    grpc_ports = [p for s in services for p in s["spec"]["ports"] if p["name"] == "grpc"]
    assert all(p.get("appProtocol") == "grpc" for p in grpc_ports)


def test_network_policy_admits_only_agents_and_the_scraper() -> None:
    objects = render("base")
    deploy, c = _serve(objects)
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    (policy,) = by_kind(objects, "NetworkPolicy")
    spec = policy["spec"]
    assert matches(spec["podSelector"]["matchLabels"], pod_labels)
    assert spec["policyTypes"] == ["Ingress"]
    port_names = {p["name"] for p in c["ports"]}
    allowed: dict[str, list[dict[str, Any]]] = {}
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule without `from` admits everyone"
        for peer in rule["from"]:
            assert peer.get("podSelector", {}).get("matchLabels"), "peers must be selected pods"
            assert "ipBlock" not in peer
        assert rule.get("ports"), "every rule names its ports"
        for port in rule["ports"]:
            assert port["port"] in port_names
            allowed.setdefault(port["port"], []).extend(rule["from"])
    assert set(allowed) == {"grpc", "metrics"}
    agents = [p["podSelector"]["matchLabels"] for p in allowed["grpc"]]
    scrapers = [p["podSelector"]["matchLabels"] for p in allowed["metrics"]]
    assert agents == [{"ctxwarden.dev/client": "true"}]
    assert scrapers and all(s not in agents for s in scrapers)


# -- migration Job -------------------------------------------------------------------------


@pytest.mark.parametrize("kdir", ["jobs/migrate", "overlays/dev-mysql"])
def test_migration_job_runs_ctxwarden_migrate(kdir: str) -> None:
    objects = render(kdir)
    job = one(objects, "Job", "ctxwarden-migrate")
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] in {"Never", "OnFailure"}
    assert job["spec"]["backoffLimit"] >= 3, "retry while the database is still starting"
    (c,) = spec["containers"]
    assert is_ctxwarden(c)
    assert c["args"] == ["migrate"]
    env = {e["name"]: e for e in c["env"]}
    ref = env["CTXWARDEN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"].startswith(SECRET_NAME) and ref["key"] == "database-url"


def test_job_and_server_use_the_same_image_tag() -> None:
    images = {
        c["image"]
        for kdir in KUSTOMIZATIONS
        for obj in workloads(render(kdir))
        for _, c in containers(pod_template(obj)["spec"])
        if is_ctxwarden(c)
    }
    assert len(images) == 1, f"ctxwarden images differ between manifests: {images}"


# -- dev overlay ------------------------------------------------------------------------


def _secret_data(secret: dict[str, Any]) -> dict[str, str]:
    import base64

    data = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    data.update(secret.get("stringData", {}))
    return data


def test_dev_overlay_points_ctxwarden_at_its_mysql(tmp_path: Path) -> None:
    objects = render("overlays/dev-mysql")
    secrets = {s["metadata"]["name"]: s for s in by_kind(objects, "Secret")}
    _, c = _serve(objects)
    # Every Secret and ConfigMap the workloads reference is in the render.
    names = set(secrets) | {cm["metadata"]["name"] for cm in by_kind(objects, "ConfigMap")}
    for obj in workloads(objects):
        spec = pod_template(obj)["spec"]
        for v in spec.get("volumes", []):
            ref = v.get("secret", {}).get("secretName") or v.get("configMap", {}).get("name")
            assert ref is None or ref in names, f"{obj['metadata']['name']}: missing {ref}"
        for _, cont in containers(spec):
            for e in cont.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                assert ref is None or ref in names, f"{obj['metadata']['name']}: missing {ref}"
            for e in cont.get("envFrom", []):
                assert e["secretRef"]["name"] in names
    env = {e["name"]: e for e in c["env"]}
    ref = env["CTXWARDEN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    url = make_url(_secret_data(secrets[ref["name"]])[ref["key"]])
    assert url.drivername == "mysql+aiomysql"
    mysql = one(objects, "StatefulSet", "ctxwarden-mysql")
    (db,) = mysql["spec"]["template"]["spec"]["containers"]
    assert db["image"] == "mysql:8.4"
    mysql_env: dict[str, str] = {}
    for e in db["envFrom"]:
        mysql_env.update(_secret_data(secrets[e["secretRef"]["name"]]))
    assert url.username == mysql_env["MYSQL_USER"]
    assert url.password == mysql_env["MYSQL_PASSWORD"]
    assert url.database == mysql_env["MYSQL_DATABASE"]
    svc = one(objects, "Service", "ctxwarden-mysql")
    assert url.host == svc["metadata"]["name"]
    assert url.port == next(p["port"] for p in svc["spec"]["ports"])
    assert matches(svc["spec"]["selector"], mysql["spec"]["template"]["metadata"]["labels"])
    assert mysql["spec"]["volumeClaimTemplates"], "the dev database keeps its data on a PVC"
    # The dev API keys parse as the server parses them.
    from ctxwarden.api.auth import load_api_keys

    keys = tmp_path / "api-keys"
    keys.write_text(_secret_data(secrets[ref["name"]])["api-keys"])
    assert load_api_keys(str(keys)), "the dev Secret holds no API key"


# -- sidecar example ------------------------------------------------------------------------


def test_sidecar_example_listens_on_loopback_with_sqlite() -> None:
    objects = render("examples/sidecar")
    deploy, c = _serve(objects)
    spec = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    roles = {cont["name"]: role for role, cont in containers(spec)}
    assert roles[c["name"]] == "sidecar", "ctxwarden runs as a native sidecar"
    args = c["args"]
    assert flag_value(args, "--listen") == f"127.0.0.1:{GRPC_PORT}"
    for flag in ("--api-keys-file", "--insecure-allow-unauthenticated", "--metrics-listen"):
        assert flag_value(args, flag) is None and flag not in args
    url = make_url(flag_value(args, "--database-url") or "")
    assert url.drivername == "sqlite" and url.database
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    data_dir = url.database.rsplit("/", 1)[0]
    assert data_dir in mounts, "the SQLite file must live on a mounted volume"
    volumes = {v["name"]: v for v in spec["volumes"]}
    data = volumes[mounts[data_dir]]
    assert "persistentVolumeClaim" in data or "emptyDir" in data
    if "persistentVolumeClaim" in data:
        claim = one(objects, "PersistentVolumeClaim")
        assert claim["metadata"]["name"] == data["persistentVolumeClaim"]["claimName"]
    # The schema is migrated first, on the same file.
    init = [cont for role, cont in containers(spec) if role == "init"]
    assert [i["args"][0] for i in init] == ["migrate"]
    assert flag_value(init[0]["args"], "--database-url") == flag_value(args, "--database-url")
    order = [cont["name"] for cont in spec["initContainers"]]
    assert order.index(init[0]["name"]) < order.index(c["name"])
    # The agent finds ctxwarden on loopback.
    (agent,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in agent.get("env", [])}
    assert env["CTXWARDEN_TARGET"] == f"127.0.0.1:{GRPC_PORT}"

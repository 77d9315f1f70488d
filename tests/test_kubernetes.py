"""deploy/kubernetes/: the manifests against the Kubernetes schemas, and the ConfigMap reload.

Every resource in the base and the components is validated against the strict (no unknown field)
OpenAPI schemas that ``kubernetes-validate`` ships, for ``KUBERNETES_VERSIONS``. The overlays'
strategic-merge patches are partial objects, so they are validated against the same schemas with
``required`` ignored (a misspelt or misplaced field still fails), and each must name a resource of
the base. When ``kubectl`` (with its built-in kustomize) is on PATH the base and every overlay are
also rendered and the result validated whole; Debian's kubernetes-client is too old for that
(kubectl 1.20, kustomize 2.0: no ``components:``, no directories in ``resources:``), so the
rendering test skips where no recent kubectl is installed. The ServiceMonitor is a CRD, not in
the core schemas: it is checked against a minimal schema written here (``SERVICE_MONITOR``).

Then what the schemas cannot say: the Services, the PodDisruptionBudget and the ServiceMonitor
select the pod; probes, ports and the scrape annotation agree with mend's flags; the security
context is non-root, read-only and without capabilities; and mend reloads rules from a ConfigMap
volume when kubelet swaps its ``..data`` symlink (``test_configmap_swap_reloads_rules``, a real
``mend run`` over files laid out exactly as kubelet's atomic writer lays them out).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kv  # type: ignore[import-untyped]
from referencing import Registry, Resource

from proxy.policy.rules.rulefile import load_rules

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
BASE = DEPLOY / "base"
OVERLAYS = sorted(p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
#: The oldest Kubernetes the manifests claim (docs/operations.md "Kubernetes"), and the newest
#: schemas the pinned kubernetes-validate (pyproject.toml, dev extras) ships.
KUBERNETES_VERSIONS = ("1.30", "1.37")
KUSTOMIZE_KINDS = {"Kustomization", "Component"}

Doc = dict[str, Any]

# --- loading -------------------------------------------------------------------------------------


def load_docs(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def kustomizations() -> list[Path]:
    return sorted(DEPLOY.rglob("kustomization.yaml"))


def listed(kustomization: Path, key: str) -> list[Path]:
    """The files (or directories) a kustomization names under ``key``."""
    doc = load_docs(kustomization)[0]
    entries = doc.get(key) or []
    paths = [entry if isinstance(entry, str) else entry["path"] for entry in entries]
    return [(kustomization.parent / p).resolve() for p in paths]


def resource_files() -> list[Path]:
    """Files in any kustomization's ``resources:`` (directories are other kustomizations)."""
    found = {p for k in kustomizations() for p in listed(k, "resources") if p.is_file()}
    return sorted(found)


def patch_files() -> list[Path]:
    return sorted({p for k in kustomizations() for p in listed(k, "patches")})


def resources() -> list[tuple[str, Doc]]:
    return [
        (f"{path.relative_to(DEPLOY)}#{i}", doc)
        for path in resource_files()
        for i, doc in enumerate(load_docs(path))
    ]


def base_resources() -> list[Doc]:
    return [
        doc for path in listed(BASE / "kustomization.yaml", "resources") for doc in load_docs(path)
    ]


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    (found,) = find(docs, kind, name)
    return found


def deployment() -> Doc:
    return one(base_resources(), "Deployment")


def container(name: str) -> Doc:
    (found,) = [
        c for c in deployment()["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    return cast(Doc, found)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# --- schemas -------------------------------------------------------------------------------------

#: What the manifests use of monitoring.coreos.com/v1 ServiceMonitor (the Prometheus Operator's
#: CRD, whose full schema is not in the core ones): closed objects, so a misspelt field fails.
_DURATION = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"}
SERVICE_MONITOR: Doc = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                            "minProperties": 1,
                        },
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}


def _schema_version(version: str) -> str:
    """The schema directory kubernetes-validate uses for ``version`` (as its ``validate`` does)."""
    return str([v for v in kv.all_versions() if kv.major_minor(v) <= version][-1])


def _partial_validator() -> type[jsonschema.protocols.Validator]:
    """Draft 2020-12 with ``required`` switched off: for patches, which are partial objects."""
    partial = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator, {"required": lambda *_: None}
    )
    return cast(type[jsonschema.protocols.Validator], partial)


def schema_errors(doc: Doc, version: str, *, partial: bool = False) -> list[str]:
    """Why ``doc`` does not validate against the strict schema of its kind (empty: it does)."""
    if doc.get("apiVersion") == "monitoring.coreos.com/v1":
        validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(SERVICE_MONITOR)
    else:
        schema_dir = f"kubernetes-json-schema/v{_schema_version(version)}-local-strict"
        api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
        schema = kv.schema_contents(f"{schema_dir}/{doc['kind'].lower()}-{api}.json", version)
        definitions = kv.schema_contents(f"{schema_dir}/_definitions.json", version)
        registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
        registry = Resource.from_contents(definitions) @ registry
        cls = _partial_validator() if partial else jsonschema.Draft202012Validator
        validator = cls(schema, registry=registry)
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


# --- the manifests against the schemas -----------------------------------------------------------


def test_every_manifest_file_is_used_by_a_kustomization() -> None:
    """No stray YAML: each file is a kustomization, a resource or a patch one of them names."""
    used = {*kustomizations(), *resource_files(), *patch_files()}
    assert set(DEPLOY.rglob("*.yaml")) == used
    for kustomization in kustomizations():
        for key in ("resources", "patches", "components"):
            for path in listed(kustomization, key):
                assert path.exists(), f"{kustomization}: {key} names missing {path}"
                if path.is_dir():
                    assert (path / "kustomization.yaml").is_file(), path


def test_kubernetes_validate_supports_the_pinned_versions() -> None:
    for version in KUBERNETES_VERSIONS:
        assert kv.major_minor(_schema_version(version)) == version


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(("where", "doc"), resources(), ids=[w for w, _ in resources()])
def test_resource_validates(where: str, doc: Doc, version: str) -> None:
    """Each resource validates against its kind's strict schema."""
    assert doc["kind"] not in KUSTOMIZE_KINDS
    assert schema_errors(doc, version) == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", patch_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_patch_validates_and_targets_a_base_resource(path: Path, version: str) -> None:
    """A patch is a valid partial object of its kind and names a resource of the base."""
    (doc,) = load_docs(path)
    assert schema_errors(doc, version, partial=True) == []
    assert find(base_resources(), doc["kind"], doc["metadata"]["name"]), "patches nothing"


def test_validation_catches_a_misspelt_field() -> None:
    """The validators are live: an unknown field fails, in a resource and in a patch."""
    doc = json.loads(json.dumps(deployment()))
    doc["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "readOnlyRootFileSystem"
    ] = True
    assert any("readOnlyRootFileSystem" in e for e in schema_errors(doc, KUBERNETES_VERSIONS[0]))
    patch = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": {"minAvailible": 1}}
    assert schema_errors(patch, KUBERNETES_VERSIONS[0], partial=True)
    monitor = one([d for _, d in resources()], "ServiceMonitor")
    bad = {**monitor, "spec": {**monitor["spec"], "endpoint": monitor["spec"]["endpoints"]}}
    assert schema_errors(bad, KUBERNETES_VERSIONS[0])


@pytest.fixture(scope="module")
def kubectl() -> str:
    """A kubectl whose built-in kustomize renders the base (offline: no cluster is contacted)."""
    found = shutil.which("kubectl")
    if found is not None:
        probe = subprocess.run(
            [found, "kustomize", str(BASE)], capture_output=True, check=False, timeout=60
        )
        if probe.returncode == 0:
            return found
    pytest.skip(
        "no kubectl with a recent kustomize (Debian's kubernetes-client 1.20 cannot render "
        "components); the base, the components and the patches are validated separately above"
    )


@pytest.mark.parametrize("target", [BASE, *OVERLAYS], ids=lambda p: str(p.relative_to(DEPLOY)))
def test_rendered_kustomization_validates(kubectl: str, target: Path) -> None:
    """``kubectl kustomize`` renders it, and every rendered resource validates."""
    result = subprocess.run(
        [kubectl, "kustomize", str(target)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert {d["kind"] for d in docs} >= {
        "Deployment",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
    }
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            assert schema_errors(doc, version) == [], doc["metadata"]["name"]
    if target != BASE:
        pods = one(docs, "Deployment")["spec"]["template"]
        assert (
            one(docs, "Deployment")["spec"]["replicas"]
            > one(docs, "PodDisruptionBudget")["spec"]["minAvailable"]
        )
        images = {c["image"] for c in pods["spec"]["containers"]}
        assert not any(i.startswith("mend:") for i in images), "images: did not retag"
        if find(docs, "ServiceMonitor"):  # scraped once: by the operator, not by annotation
            assert pods["metadata"]["annotations"]["prometheus.io/scrape"] == "false"


# --- what the schemas cannot say -----------------------------------------------------------------


def pod_labels() -> dict[str, str]:
    return cast(dict[str, str], deployment()["spec"]["template"]["metadata"]["labels"])


def selects_pod(selector: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= pod_labels().items()


def test_services_select_the_pod_and_reach_mend_not_the_app() -> None:
    mend_ports = {p["name"]: p["containerPort"] for p in container("mend")["ports"]}
    for service in find(base_resources(), "Service"):
        assert selects_pod(service["spec"]["selector"]), service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in mend_ports, port
    agents = one(base_resources(), "Service", "orders")
    assert [p["targetPort"] for p in agents["spec"]["ports"]] == ["http"]
    assert "ports" not in container("app"), "the app is reachable only through mend"


def test_ports_probes_and_annotations_agree_with_mends_flags() -> None:
    mend = container("mend")
    args = mend["args"]
    ports = {p["name"]: p["containerPort"] for p in mend["ports"]}
    assert flag(args, "--listen") == f"0.0.0.0:{ports['http']}"
    assert flag(args, "--admin-listen") == f"0.0.0.0:{ports['admin']}"
    assert mend["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert mend["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert mend["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    annotations = deployment()["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ports["admin"])
    assert annotations["prometheus.io/path"] == "/metrics"
    # mend's upstream is the app, on loopback
    app_args = container("app")["args"]
    assert flag(args, "--upstream") == (
        f"http://{flag(app_args, '--host')}:{flag(app_args, '--port')}"
    )
    assert flag(app_args, "--host") == "127.0.0.1"


def test_servicemonitor_scrapes_the_admin_service() -> None:
    component = DEPLOY / "components" / "servicemonitor"
    monitor = one(load_docs(component / "servicemonitor.yaml"), "ServiceMonitor")
    services = [
        s
        for s in find(base_resources(), "Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in services] == ["orders-mend-admin"]
    names = {p["name"] for p in services[0]["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in names
        assert endpoint.get("path", "/metrics") == "/metrics"


def test_disruption_budget_selects_the_pod_and_allows_a_drain() -> None:
    pdb = one(base_resources(), "PodDisruptionBudget")
    assert selects_pod(pdb["spec"]["selector"]["matchLabels"])
    assert deployment()["spec"]["replicas"] > pdb["spec"]["minAvailable"]
    assert deployment()["spec"]["selector"]["matchLabels"].items() <= pod_labels().items()


def test_security_context_and_resources() -> None:
    """Non-root (the image's uid), RuntimeDefault seccomp, read-only root, no capabilities, and
    requests and limits for every container."""
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    user = re.search(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert user is not None
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        int(user[1]),
        int(user[2]),
    )
    for c in pod["containers"]:
        context = c["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, c["name"]
        assert context["allowPrivilegeEscalation"] is False, c["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert context.get("privileged", False) is False, c["name"]
        for kind in ("requests", "limits"):
            assert set(c["resources"][kind]) == {"cpu", "memory"}, (c["name"], kind)


def test_rules_come_from_the_configmap_as_a_directory() -> None:
    """--rules is the ConfigMap's mount, a whole directory: kubelet never updates a subPath."""
    pod = deployment()["spec"]["template"]["spec"]
    mend = container("mend")
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    (mount,) = [m for m in mend["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount
    assert "subPathExpr" not in mount
    assert mount["readOnly"] is True
    assert flag(mend["args"], "--rules") == mount["mountPath"]
    assert one(base_resources(), "ConfigMap", volume["configMap"]["name"])
    # the one place mend writes (the --workers metrics directory) is a volume, not the root
    tmp = [m for m in mend["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp
    assert any("emptyDir" in v for v in pod["volumes"] if v["name"] == tmp[0]["name"])


def test_configmap_rules_pass_mend_check(tmp_path: Path) -> None:
    """The ConfigMap's rule files load as mend loads them (``mend check``)."""
    configmap = one(base_resources(), "ConfigMap", "mend-rules")
    assert configmap["data"]
    for name, text in configmap["data"].items():
        assert name.endswith((".yaml", ".yml")), f"{name}: mend reads only *.yaml from --rules"
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert [r.spec.id for r in load_rules([tmp_path])] == ["orders.not_confirmed"]


def test_overlay_images_retag_the_base_image() -> None:
    images = {
        c["image"].partition(":")[0] for c in deployment()["spec"]["template"]["spec"]["containers"]
    }
    for overlay in OVERLAYS:
        doc = load_docs(overlay / "kustomization.yaml")[0]
        for image in doc.get("images") or []:
            assert image["name"] in images, f"{overlay}: images: {image['name']} matches nothing"


# --- the ConfigMap volume: kubelet's atomic swap, and mend reloading it --------------------------


class ConfigMapVolume:
    """Writes a directory as kubelet's AtomicWriter does for a ConfigMap volume.

    Each payload goes into a fresh ``..<timestamp>`` directory; ``..data`` is a symlink to the
    current one, replaced atomically (a ``..data_tmp`` symlink renamed over it); every key is a
    symlink ``key -> ..data/key``, created when the key first appears and removed when it goes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.writes = 0

    def write(self, payload: dict[str, str]) -> None:
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        self.writes += 1
        stamp = datetime.now(UTC).strftime("..%Y_%m_%d_%H_%M_%S.") + f"{self.writes:09d}"
        ts_dir = self.root / stamp
        ts_dir.mkdir(mode=0o755)
        for key, text in payload.items():
            (ts_dir / key).write_text(text, encoding="utf-8")
            (ts_dir / key).chmod(0o644)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(stamp)
        os.replace(tmp_link, self.root / "..data")  # the atomic swap
        for key in payload:
            if not (self.root / key).is_symlink():
                (self.root / key).symlink_to(Path("..data") / key)
        for entry in self.root.iterdir():
            if not entry.name.startswith("..") and entry.name not in payload:
                entry.unlink()
        if old is not None:
            shutil.rmtree(self.root / old)


def teapot_rules(status: int, code: str) -> str:
    return (
        f"rules:\n  - id: k8s.s{status}\n    when: {{status: {status}}}\n"
        f"    envelope: {{code: {code}, category: validation}}\n"
    )


class _StatusHandler(BaseHTTPRequestHandler):
    """``GET /<status>`` answers that status with a JSON error body."""

    def do_GET(self) -> None:
        body = b'{"error": "as asked"}'
        self.send_response(int(self.path.strip("/")))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def status_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _eventually(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def test_configmap_swap_reloads_rules(tmp_path: Path, status_upstream: str) -> None:
    """A real ``mend run --rules <ConfigMap volume>``: each atomic ``..data`` swap is reloaded --
    a changed key, a new key, a removed key -- a broken one is rejected and the rules in force
    kept, and kubelet's ``..`` entries are never read as rule files."""
    volume = ConfigMapVolume(tmp_path / "rules")
    volume.write({"orders.yaml": teapot_rules(418, "TEAPOT_V1")})
    listen, admin = _free_port(), _free_port()
    agent, admin_url = f"http://127.0.0.1:{listen}", f"http://127.0.0.1:{admin}"
    log = tmp_path / "mend.log"
    with log.open("wb") as out:  # the packs only make each reload slower: left out
        mend = subprocess.Popen(
            [sys.executable, "-m", "proxy", "run", "--upstream", status_upstream,
             "--listen", f"127.0.0.1:{listen}", "--admin-listen", f"127.0.0.1:{admin}",
             "--rules", str(volume.root), "--no-default-packs"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def code(status: int) -> str:
        return _get(f"{agent}/{status}")[1].get("X-Error-Code", "")

    def rule_count() -> int:
        return int(json.loads(_get(f"{admin_url}/readyz")[2])["rules"])

    def reloads(result: str) -> float:
        text = _get(f"{admin_url}/metrics")[2].decode()
        found = re.search(rf'^mend_rule_reloads_total{{result="{result}"}} (\S+)$', text, re.M)
        return float(found[1]) if found else 0.0

    try:
        _eventually(
            "mend ready",
            lambda: mend.poll() is not None or _ready(f"{admin_url}/readyz"),
        )
        assert mend.poll() is None, log.read_text()[-3000:]
        assert code(418) == "TEAPOT_V1"
        base = rule_count()
        assert code(451) != "LEGAL"

        # a key changes and a key appears, in one swap
        volume.write(
            {
                "orders.yaml": teapot_rules(418, "TEAPOT_V2"),
                "legal.yaml": teapot_rules(451, "LEGAL"),
            }
        )
        _eventually("the swap reloaded", lambda: code(418) == "TEAPOT_V2")
        assert code(451) == "LEGAL"
        assert rule_count() == base + 1  # legal.yaml once: not again under ..data or ..<stamp>

        # a broken update is refused; the rules in force stay
        failures = reloads("failure")
        volume.write({"orders.yaml": "rules: [", "legal.yaml": teapot_rules(451, "LEGAL")})
        _eventually("the broken swap was rejected", lambda: reloads("failure") > failures)
        assert (code(418), code(451)) == ("TEAPOT_V2", "LEGAL")

        # fixed, and a key removed
        volume.write({"orders.yaml": teapot_rules(418, "TEAPOT_V3")})
        _eventually("the fix reloaded", lambda: code(418) == "TEAPOT_V3")
        assert code(451) != "LEGAL"
        assert rule_count() == base
        assert sorted(p.name for p in volume.root.iterdir() if not p.name.startswith("..")) == [
            "orders.yaml"
        ]
        assert mend.poll() is None
    finally:
        mend.terminate()
        mend.wait(30)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    events = [line["event"] for line in lines if line.get("trigger") == "watch"]
    assert events == ["rules_reloaded", "rules_reload_rejected", "rules_reloaded"], events
    assert mend.returncode == 0, log.read_text()[-2000:]


def _ready(url: str) -> bool:
    try:
        return _get(url)[0] == 200
    except OSError:
        return False

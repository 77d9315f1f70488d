"""Static checks of the observability artefacts: Prometheus config and alerts, the Grafana
dashboard and provisioning, the Dockerfile and docker-compose.yml.

Tools that are not Python packages (promtool, docker-compose) come from
scripts/install-system-deps. Without them the tests that need them skip, except under CI,
where a missing tool is a broken CI setup and fails.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "prometheus"
DASHBOARD = REPO / "grafana" / "dashboards" / "mend.json"
SCHEMA = REPO / "grafana" / "schema" / "dashboard.schema.json"
COMPOSE = REPO / "docker-compose.yml"
DESIGN = REPO / "docs" / "design.md"

# Labels Prometheus itself adds to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})


def tool(name: str) -> str:
    """Path of a system tool, or skip (fail under CI) naming the script that installs it."""
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found:
        return found
    reason = f"{name} is not installed; run scripts/install-system-deps as root"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must install it)")
    pytest.skip(reason)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def alert_rules() -> list[dict[str, Any]]:
    doc = load_yaml(PROM_DIR / "alerts.yml")
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    with DASHBOARD.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dash.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def query_panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dash) if p["type"] != "row"]


def design_metrics() -> dict[str, frozenset[str]]:
    """Metric name -> label names, from docs/design.md's metric table (the source of truth)."""
    metrics: dict[str, frozenset[str]] = {}
    row = re.compile(r"^\|\s*`(mend_\w+)`\s*\|\s*(\w+)\s*\|(.*)\|\s*$")
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        m = row.match(line)
        if not m:
            continue
        name, kind, label_cell = m.groups()
        # "reason (`unreachable`, ...)": the label names are the words outside parentheses
        labels = frozenset(re.findall(r"\b[a-z_]+\b", re.sub(r"\([^)]*\)", "", label_cell)))
        if kind == "histogram":
            metrics[f"{name}_bucket"] = labels | {"le"}
            metrics[f"{name}_sum"] = labels
            metrics[f"{name}_count"] = labels
        else:
            metrics[name] = labels
    return metrics


SELECTOR = re.compile(r"\b(mend_\w+|up)\b(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def metric_selectors(expr: str) -> list[tuple[str, set[str], str]]:
    """(metric, label names matched, raw matcher text) for each series selector in a query."""
    out = []
    for m in SELECTOR.finditer(expr):
        body = m.group(2) or ""
        out.append((m.group(1), {name for name, _ in MATCHER.findall(body)}, body))
    return out


def all_queries() -> list[tuple[str, str]]:
    """(where, expr) for every alert and every dashboard target."""
    out = [(f"alert {r['alert']}", str(r["expr"])) for r in alert_rules()]
    for panel in query_panels(dashboard()):
        out += [(f"panel {panel['title']!r} {t['refId']}", t["expr"]) for t in panel["targets"]]
    return out


# --- Prometheus ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("check", "config", "prometheus/prometheus.yml"),
        ("check", "rules", "prometheus/alerts.yml"),
        ("test", "rules", "prometheus/alerts_test.yml"),
    ],
    ids=["check-config", "check-rules", "test-rules"],
)
def test_promtool_accepts(argv: tuple[str, ...]) -> None:
    """promtool validates the scrape config, the rule file, and passes the rule unit tests."""
    result = run(tool("promtool"), *argv)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_can_fail(tmp_path: Path) -> None:
    """The rule unit tests catch a changed threshold (so the green run above means something)."""
    promtool = tool("promtool")
    rules = (PROM_DIR / "alerts.yml").read_text(encoding="utf-8")
    assert ") > 0.25" in rules
    (tmp_path / "alerts.yml").write_text(rules.replace(") > 0.25", ") > 0.75"), encoding="utf-8")
    shutil.copy(PROM_DIR / "alerts_test.yml", tmp_path / "alerts_test.yml")
    result = run(promtool, "test", "rules", str(tmp_path / "alerts_test.yml"))
    assert result.returncode != 0
    assert "MendUnmatchedErrorsRising" in result.stdout + result.stderr


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_is_well_formed(rule: dict[str, Any]) -> None:
    """Every alert waits (`for:`), has a severity, and tells the on-call what and why."""
    assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), "needs a `for:` duration"
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    for key in ("summary", "description"):
        assert rule["annotations"].get(key, "").strip(), f"missing annotation {key}"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_has_firing_and_quiet_unit_tests(rule: dict[str, Any]) -> None:
    """alerts_test.yml has, for each alert, a case where it fires and one where it must not."""
    cases = [
        case
        for test in load_yaml(PROM_DIR / "alerts_test.yml")["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == rule["alert"]
    ]
    assert any(case["exp_alerts"] for case in cases), "no case where it fires"
    assert any(not case["exp_alerts"] for case in cases), "no case where it stays quiet"


@pytest.mark.parametrize(
    "expected",
    [
        "MendUnmatchedErrorsRising",
        "MendNonRetryableRetryStorm",
        "MendUpstreamUnreachable",
        "MendRuleReloadFailing",
        "MendHighServerErrorEnvelopeRate",
    ],
)
def test_required_alert_exists(expected: str) -> None:
    """The alerts issue 5 asks for are all defined."""
    assert expected in {r["alert"] for r in alert_rules()}


def test_prometheus_scrapes_the_compose_mend_admin_port() -> None:
    """The compose Prometheus scrapes the mend service on the port mend's admin listener uses."""
    config = load_yaml(PROM_DIR / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for sc in jobs["mend"]["static_configs"] for t in sc["targets"]]
    assert targets == ["mend:9464"]
    assert "alerts.yml" in config["rule_files"]
    compose = load_yaml(COMPOSE)["services"]["mend"]
    assert "0.0.0.0:9464" in compose["command"]


# --- queries against the metric table ------------------------------------------------------------


@pytest.mark.parametrize(("where", "expr"), all_queries(), ids=[w for w, _ in all_queries()])
def test_query_uses_only_documented_metrics_and_labels(where: str, expr: str) -> None:
    """Every metric and label a query names is in docs/design.md's metric table."""
    known = design_metrics()
    known["up"] = frozenset()
    selectors = metric_selectors(expr)
    assert selectors, f"{where}: no metric"
    available: set[str] = set(TARGET_LABELS)
    for metric, labels, _ in selectors:
        assert metric in known, f"{where}: {metric} is not in docs/design.md"
        assert labels <= known[metric] | TARGET_LABELS, f"{where}: {metric} has no {labels}"
        available |= known[metric]
    for group in GROUPING.findall(expr):
        names = {n.strip() for n in group.split(",") if n.strip()}
        assert names <= available, f"{where}: groups by unknown label(s) {names - available}"


def test_metric_table_is_parsed() -> None:
    """The design table parser finds the metrics (else the test above would prove nothing)."""
    metrics = design_metrics()
    assert metrics["mend_errors_total"] == {
        "code",
        "category",
        "route",
        "upstream_status",
        "rule",
        "protocol",
    }
    assert metrics["mend_upstream_failures_total"] == {"route", "reason"}
    assert metrics["mend_request_duration_seconds_bucket"] == {"route", "le"}
    assert metrics["mend_rules_loaded"] == frozenset()


@pytest.mark.parametrize(
    ("where", "expr"),
    [q for q in all_queries() if q[0].startswith("panel")],
    ids=[w for w, _ in all_queries() if w.startswith("panel")],
)
def test_panel_query_filters_by_route_variable(where: str, expr: str) -> None:
    """Every dashboard selector of a metric that has a route label filters on $route."""
    known = design_metrics()
    for metric, _, body in metric_selectors(expr):
        if "route" in known.get(metric, frozenset()):
            assert 'route=~"$route"' in body, f"{where}: {metric} ignores $route"


def test_dashboard_covers_every_documented_metric() -> None:
    """Each metric of the design table is shown somewhere on the dashboard."""
    used = {
        m
        for p in query_panels(dashboard())
        for t in p["targets"]
        for m, _, _ in metric_selectors(t["expr"])
    }
    documented = {re.sub(r"_(bucket|sum|count)$", "", m) for m in design_metrics()}
    used_bases = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    assert documented - used_bases == set()


# --- Grafana dashboard: schema -------------------------------------------------------------------

SCHEMA_KEYWORDS = frozenset(
    {
        "$schema",
        "$comment",
        "$ref",
        "definitions",
        "description",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
    }
)
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "number": (int, float),
    "integer": (int,),
    "null": (type(None),),
}


def schema_errors(value: Any, schema: Any, root: dict[str, Any], at: str = "") -> list[str]:
    """JSON Schema (draft 7) validation, for the keywords in SCHEMA_KEYWORDS only.

    The project has no jsonschema dependency; test_schema_uses_only_supported_keywords makes
    sure this never silently ignores a keyword the schema relies on.
    """
    if schema is True or schema == {}:
        return []
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return schema_errors(value, node, root, at)
    mismatch = _mismatch(value, schema, root, at)
    if mismatch is not None:
        return [mismatch]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += _object_errors(value, schema, root, at)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], root, f"{at}/{i}")
    return errors


def _mismatch(value: Any, schema: Any, root: dict[str, Any], at: str) -> str | None:
    """What ``anyOf``, ``const``, ``enum`` or ``type`` says of ``value`` itself, if it fails."""
    if "anyOf" in schema:
        branches = [schema_errors(value, s, root, at) for s in schema["anyOf"]]
        if all(branches):
            return f"{at or '/'}: matches no alternative ({min(branches, key=len)[0]})"
    if "const" in schema and value != schema["const"]:
        return f"{at or '/'}: {value!r} is not {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{at or '/'}: {value!r} not one of {schema['enum']}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(
            isinstance(value, JSON_TYPES[t])
            and not (isinstance(value, bool) and t in {"number", "integer"})
            for t in types
        )
        if not ok:
            return f"{at or '/'}: {type(value).__name__} is not {types}"
    return None


def _object_errors(value: dict[str, Any], schema: Any, root: dict[str, Any], at: str) -> list[str]:
    """An object's required, known and additional properties."""
    props = schema.get("properties", {})
    errors = [f"{at}/{k}: required" for k in schema.get("required", []) if k not in value]
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            errors += schema_errors(item, props[key], root, f"{at}/{key}")
        elif extra is False:
            errors.append(f"{at}/{key}: not allowed here")
        elif isinstance(extra, dict):
            errors += schema_errors(item, extra, root, f"{at}/{key}")
    return errors


def grafana_schema() -> dict[str, Any]:
    with SCHEMA.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def test_schema_uses_only_supported_keywords() -> None:
    """The vendored Grafana schema uses no keyword the validator would ignore."""
    found: set[str] = set()

    def walk(node: Any, keys_are_names: bool = False) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                if not keys_are_names:
                    found.add(key)
                # under properties/definitions the keys are names, their values schemas
                walk(child, key in {"properties", "definitions"} and not keys_are_names)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(grafana_schema())
    assert found <= SCHEMA_KEYWORDS, found - SCHEMA_KEYWORDS


def test_dashboard_matches_grafana_schema() -> None:
    """grafana/dashboards/mend.json is a valid dashboard per Grafana's own dashboard schema."""
    schema = grafana_schema()
    assert schema_errors(dashboard(), schema, schema) == []


def _set(path: str, value: Any) -> Any:
    def mutate(dash: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = dash
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Any:
    def mutate(dash: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = dash
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return mutate


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (_set("refreshRate", "10s"), "/refreshRate: not allowed"),
        (_set("panels.1.gridPos.w", "12"), "/panels/1"),
        (_drop("templating.list.1.name"), "/templating/list/1"),
        (_set("panels.1.fieldConfig.defaults.unit", 5), "/panels/1"),
        (_set("schemaVersion", "39"), "/schemaVersion"),
        (_set("graphTooltip", 7), "/graphTooltip"),
    ],
    ids=[
        "unknown-key",
        "string-width",
        "variable-without-name",
        "numeric-unit",
        "string-schema-version",
        "bad-enum",
    ],
)
def test_schema_rejects_broken_dashboards(mutation: Any, expected: str) -> None:
    """The schema check fails for dashboards Grafana would not accept."""
    schema = grafana_schema()
    broken = copy.deepcopy(dashboard())
    mutation(broken)
    errors = schema_errors(broken, schema, schema)
    assert any(expected in e for e in errors), errors


# --- Grafana dashboard: structure ----------------------------------------------------------------


def test_dashboard_is_current_schema_version() -> None:
    """schemaVersion is one current Grafana loads without migrating."""
    assert dashboard()["schemaVersion"] >= 39


def test_panel_ids_are_unique() -> None:
    """No two panels share an id (Grafana would mix up their state)."""
    ids = [p["id"] for p in panels(dashboard())]
    assert len(ids) == len(set(ids))


def test_panels_fit_the_grid_without_overlapping() -> None:
    """Every panel lies within the 24-column grid and no two panels cover the same cell."""
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard()):
        g = panel["gridPos"]
        assert g["w"] > 0, panel["title"]
        assert g["h"] > 0, panel["title"]
        assert g["x"] >= 0, panel["title"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("panel", query_panels(dashboard()), ids=lambda p: p["title"])
def test_panel_targets_are_complete(panel: dict[str, Any]) -> None:
    """Each query panel has targets, each with an expr and a refId unique in the panel."""
    targets = panel["targets"]
    assert targets
    assert all(t.get("expr", "").strip() for t in targets)
    ref_ids = [t["refId"] for t in targets]
    assert all(ref_ids)
    assert len(ref_ids) == len(set(ref_ids))


@pytest.mark.parametrize("panel", query_panels(dashboard()), ids=lambda p: p["title"])
def test_panel_datasources_use_the_variable(panel: dict[str, Any]) -> None:
    """Panels and targets name the ${datasource} variable, never a fixed datasource uid."""
    refs = [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]
    assert all(r == {"type": "prometheus", "uid": "${datasource}"} for r in refs), refs


def test_panel_types_are_current() -> None:
    """Only current (non-Angular) panel types, and the ones issue 5 asks for are all there."""
    types = {p["type"] for p in panels(dashboard())}
    assert types <= {"row", "timeseries", "stat", "table", "bargauge", "gauge", "text"}
    assert {"timeseries", "stat", "table", "bargauge"} <= types


def test_template_variables() -> None:
    """A prometheus datasource variable and a multi-select route variable with All."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    route = variables["route"]
    assert route["type"] == "query"
    assert route["query"]["query"] == "label_values(mend_requests_total, route)"
    assert route["datasource"]["uid"] == "${datasource}"
    assert route["includeAll"] is True
    assert route["multi"] is True
    assert route["allValue"] == ".*"


@pytest.mark.parametrize(
    ("topic", "pattern"),
    [
        ("errors by code", r"sum by \(code\) \(rate\(mend_errors_total"),
        ("errors by category", r"sum by \(category\) \(rate\(mend_errors_total"),
        ("retryable", r'mend_error_actions_total\{[^}]*action="retry"'),
        ("terminal", r'mend_error_actions_total\{[^}]*action!="retry"'),
        ("top codes", r"topk\(\d+, sum by \(code[^)]*\) \(increase\(mend_errors_total"),
        ("coverage", r"mend_unmatched_errors_total.*/ sum\((rate|increase)\(mend_errors_total"),
        ("redactions", r"sum by \(kind\) \(increase\(mend_redactions_total"),
        ("upstream failures", r"sum by \(reason\) \(rate\(mend_upstream_failures_total"),
        ("p99 latency", r"histogram_quantile\(0\.99, .*mend_request_duration_seconds_bucket"),
        (
            "overhead",
            r"mend_processing_duration_seconds_sum.*/ .*mend_processing_duration_seconds_count",
        ),
        ("p99 overhead", r"histogram_quantile\(0\.99, .*mend_processing_duration_seconds_bucket"),
        ("rewrite", r"histogram_quantile\(0\.95, .*mend_rewrite_duration_seconds_bucket"),
        ("reload status", r"mend_rules_last_reload_successful"),
        ("reload results", r"sum by \(result\) \(increase\(mend_rule_reloads_total"),
    ],
)
def test_dashboard_shows(topic: str, pattern: str) -> None:
    """The dashboard has a query for each view issue 5 asks for."""
    exprs = [t["expr"] for p in query_panels(dashboard()) for t in p["targets"]]
    assert any(re.search(pattern, e) for e in exprs), topic


# --- Grafana provisioning ------------------------------------------------------------------------


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = load_yaml(COMPOSE)["services"]
    return services


def test_grafana_datasource_points_at_compose_prometheus() -> None:
    """The provisioned datasource is the compose prometheus service, as the default."""
    ds = load_yaml(REPO / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    assert len(ds) == 1
    assert ds[0]["type"] == "prometheus"
    assert ds[0]["isDefault"] is True
    assert ds[0]["url"] == "http://prometheus:9090"
    assert "prometheus" in compose_services()


def test_grafana_dashboard_provider_reads_the_mounted_dashboards() -> None:
    """The file provider and the home dashboard read where compose mounts grafana/dashboards."""
    provider = load_yaml(REPO / "grafana/provisioning/dashboards/mend.yml")["providers"][0]
    grafana = compose_services()["grafana"]
    mounts = {p[0]: p[1] for p in (v.split(":") for v in grafana["volumes"]) if len(p) > 1}
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


# --- docker-compose and Dockerfile ---------------------------------------------------------------


def test_compose_config_is_valid() -> None:
    """docker-compose accepts the file (offline: no engine or images needed)."""
    result = run(tool("docker-compose"), "-f", str(COMPOSE), "config", "-q")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(compose_services()))
def test_compose_service_has_healthcheck(name: str) -> None:
    """Every service declares a healthcheck with a command."""
    check = compose_services()[name].get("healthcheck", {})
    assert check.get("test"), f"{name} has no healthcheck"


def test_service_healthy_dependencies_have_healthchecks() -> None:
    """A `condition: service_healthy` dependency can become healthy: it has a healthcheck."""
    services = compose_services()
    waits = [
        (name, target)
        for name, service in services.items()
        for target, spec in (service.get("depends_on") or {}).items()
        if isinstance(spec, dict) and spec.get("condition") == "service_healthy"
    ]
    assert waits
    for name, target in waits:
        assert target in services, f"{name} depends on unknown {target}"
        assert services[target].get("healthcheck", {}).get("test"), f"{name} waits on {target}"


def bind_mounts() -> list[tuple[str, str]]:
    return [
        (name, volume.split(":", 1)[0])
        for name, service in compose_services().items()
        for volume in service.get("volumes", [])
        if isinstance(volume, str) and volume.startswith((".", "/"))
    ]


@pytest.mark.parametrize(("service", "source"), bind_mounts())
def test_bind_mount_source_exists(service: str, source: str) -> None:
    """Every bind-mounted path is in the repository (a missing one becomes an empty directory)."""
    assert (REPO / source).exists(), f"{service} mounts missing {source}"


@pytest.mark.parametrize(
    ("service", "port"),
    [(n, str(p)) for n, s in compose_services().items() for p in s.get("ports", [])],
)
def test_published_ports_are_loopback_only(service: str, port: str) -> None:
    """Published ports bind to 127.0.0.1 so the demo is not exposed on the network."""
    assert port.startswith("127.0.0.1:"), f"{service} publishes {port}"


def dockerfile_lines() -> list[str]:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def test_dockerfile_copy_sources_exist_and_are_not_ignored() -> None:
    """Every COPY source exists and is not excluded by .dockerignore."""
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    sources = [
        s
        for line in dockerfile_lines()
        if line.startswith("COPY ") and "--from=" not in line  # not from a build stage
        for s in line.split()[1:-1]
        if not s.startswith("--")
    ]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: missing"
        assert source not in ignored, f"COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize(
    "pattern",
    [
        r"^FROM python:3\.11-slim$",
        r"^USER (?!root\b|0\b)\w+(:\w+)?$",
        r"^EXPOSE 8080 9464$",
        r"^HEALTHCHECK .*urllib\.request\.urlopen\('http://127\.0\.0\.1:9464/healthz'",
        r'^ENTRYPOINT \["mend"\]$',
    ],
)
def test_dockerfile_has(pattern: str) -> None:
    """Image: slim Python 3.11, non-root, both ports, curl-free healthcheck, `mend` entrypoint."""
    assert any(re.search(pattern, line) for line in dockerfile_lines()), pattern


def test_dockerfile_user_comes_after_install() -> None:
    """Packages install as root, then the image drops to the unprivileged user."""
    lines = dockerfile_lines()
    user = next(i for i, line in enumerate(lines) if line.startswith("USER "))
    assert all(not line.startswith("RUN pip") for line in lines[user:])


def test_install_script_is_idempotent_when_tools_present() -> None:
    """With everything installed, the script changes nothing and says so."""
    for name in ("promtool", "docker-compose", "nginx", "wrk"):
        tool(name)
    result = run("bash", str(REPO / "scripts" / "install-system-deps"))
    assert result.returncode == 0, result.stderr
    assert "all present" in result.stdout

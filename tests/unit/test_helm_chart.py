"""The Helm chart deploy/helm/commwatch: lint it, render it offline (helm-python-sdk, no helm
binary, no cluster) for the default values and every ci/*-values.yaml, validate every
manifest against the Kubernetes API schemas (kubernetes-validate), and check what a cluster
would only reveal at run time: selectors, mounts, where credentials land, hooks."""

from __future__ import annotations

import base64
import dataclasses
import functools
import re
import shutil
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from commwatch.settings import Settings, env_key

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "commwatch"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
# The newest Kubernetes minor the schemas bundled with kubernetes-validate cover, and the
# oldest the chart supports (Chart.yaml kubeVersion).
KUBE_VERSIONS = ("1.34", "1.25")
RELEASE, NAMESPACE = "cw", "observability"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
SECRET_FIELDS = {f.name for f in dataclasses.fields(Settings) if f.metadata.get("secret")}
KNOWN_ENV = {env_key(f.name) for f in dataclasses.fields(Settings)}

helm.disable_logging()


@pytest.fixture(scope="module", autouse=True)
def _schemas_read_once():
    """kubernetes-validate parses its JSON schemas on every call; read each file once here."""
    from kubernetes_validate import utils

    original = utils.schema_contents
    utils.schema_contents = functools.lru_cache(maxsize=None)(original)
    yield
    utils.schema_contents = original


def _values(path: Path | None) -> dict:
    return (yaml.safe_load(path.read_text()) or {}) if path else {}


@functools.lru_cache(maxsize=None)
def _chart():
    return helm.Chart.load(CHART)


def render(values: dict | None = None) -> list[dict]:
    out = _chart().render(values or {}, name=RELEASE, namespace=NAMESPACE)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


@functools.lru_cache(maxsize=None)
def _render_file(name: str) -> tuple:
    return tuple(render(_values(CHART / "ci" / name if name else None)))


def rendered(path: Path | None) -> list[dict]:
    return list(_render_file(path.name if path else ""))


def kinds(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name_suffix: str = "") -> dict:
    found = [d for d in kinds(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"{kind} *{name_suffix}: {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def secret_data(doc: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}


VALUES_FILES = [None, *CI_VALUES]
IDS = ["chart-defaults", *(p.name for p in CI_VALUES)]


# --- lint, render, validate -------------------------------------------------------------

def test_every_feature_has_a_ci_values_file():
    names = {p.name for p in CI_VALUES}
    for feature in ("default", "statefulset", "existing-secret", "credentials", "strimzi", "altinity-clickhouse",
                    "monitoring", "networkpolicy", "pdb", "agent-hostnetwork", "kafka-mtls"):
        assert f"{feature}-values.yaml" in names


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=IDS)
def test_lint_is_clean(values_file):
    report = helm.lint(CHART, _values(values_file), strict=True, kube_version=f"v{KUBE_VERSIONS[0]}.0")
    assert report["errors"] == []
    # severity 1 is informational ("icon is recommended"); warnings and errors fail
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_lint_reports_a_broken_template(tmp_path):
    copy = tmp_path / "commwatch"
    shutil.copytree(CHART, copy)  # follows the dashboards/ and rules/ links
    (copy / "templates" / "broken.yaml").write_text("kind: ConfigMap\nmetadata: {{ .Values.nope.missing }}\n")
    report = helm.lint(copy, {}, strict=True)
    assert [m for m in report["messages"] if m["severity"] == 3 and "nope" in m["error"]]


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=IDS)
def test_manifests_validate_against_kubernetes(values_file):
    docs = rendered(values_file)
    assert len(docs) >= 4
    validated = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        validated += 1
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert len(doc["metadata"]["name"]) <= 63
    assert validated >= 4


def test_validation_catches_a_broken_manifest():
    deployment = one(rendered(None), "Deployment", "-worker")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSIONS[0], strict=True)


# --- selectors, ports, services -------------------------------------------------------------

@pytest.mark.parametrize("values_file", VALUES_FILES, ids=IDS)
def test_labels_and_selectors_match(values_file):
    docs = rendered(values_file)
    pods = {}
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            labels = doc["spec"]["template"]["metadata"]["labels"]
            if doc["kind"] != "Job":
                assert matches(doc["spec"]["selector"]["matchLabels"], labels), doc["metadata"]["name"]
                pods[doc["metadata"]["name"]] = (labels, pod_spec(doc))
    # each Service selects the pods of exactly one workload, on a port the pod declares
    for svc in kinds(docs, "Service"):
        selected = [n for n, (labels, _) in pods.items() if matches(svc["spec"]["selector"], labels)]
        assert len(selected) == 1, (svc["metadata"]["name"], selected)
        _, spec = pods[selected[0]]
        port_names = {p["name"] for c in spec["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names
    for pdb in kinds(docs, "PodDisruptionBudget"):
        assert sum(matches(pdb["spec"]["selector"]["matchLabels"], l) for l, _ in pods.values()) == 1
    for sm in kinds(docs, "ServiceMonitor"):
        services = [s for s in kinds(docs, "Service") if matches(sm["spec"]["selector"]["matchLabels"],
                                                                 s["metadata"]["labels"])]
        assert services and len(services) == len(kinds(docs, "Service"))
        for endpoint in sm["spec"]["endpoints"]:
            assert all(endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in services)
    for np in kinds(docs, "NetworkPolicy"):
        assert all(matches(np["spec"]["podSelector"]["matchLabels"], l) for l, _ in pods.values())


@pytest.mark.parametrize("component", ["worker", "sink", "notify"])
def test_probes_ask_the_loop_on_the_metrics_port(component):
    docs = rendered(None)
    container = pod_spec(one(docs, "Deployment", "-" + component))["containers"][0]
    assert container["args"] == [component]
    service = one(docs, "Service", "-" + component)["spec"]
    assert service["ports"][0]["targetPort"] == "metrics"
    assert service["publishNotReadyAddresses"] is True  # a worker behind is still scraped
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9464}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # the process fails /livez after liveness_stall_s: the probe waits at least that long
    live = container["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30
    cm = one(docs, "ConfigMap", RELEASE + "-commwatch")["data"]
    assert cm["COMMWATCH_METRICS_HOST"] == "0.0.0.0"


def test_components_run_their_commands():
    docs = rendered(None)
    args = {d["metadata"]["name"]: pod_spec(d)["containers"][0]["args"] for d in docs if d["kind"] in WORKLOAD_KINDS}
    assert args == {
        "cw-commwatch-worker": ["worker"], "cw-commwatch-sink": ["sink"], "cw-commwatch-notify": ["notify"],
        "cw-commwatch-agent": ["agent"], "cw-commwatch-migrate": ["db", "migrate"],
    }


def test_worker_replicas_may_not_exceed_partitions():
    with pytest.raises(helm.HelmError, match=r"worker.replicas: 5 is more than kafka.partitions \(4\)"):
        render({"worker": {"replicas": 5}, "kafka": {"partitions": 4}})
    docs = rendered(CHART / "ci" / "statefulset-values.yaml")
    sts = one(docs, "StatefulSet", "-worker")
    assert sts["spec"]["replicas"] == 6
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert one(docs, "Service", "-worker")["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == "cw-commwatch-worker"


def test_containers_run_as_non_root_with_read_only_root():
    for values_file in VALUES_FILES:
        for doc in rendered(values_file):
            if doc["kind"] not in WORKLOAD_KINDS:
                continue
            spec = pod_spec(doc)
            for c in spec["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"] is True
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
                assert c["resources"]["requests"]
            if doc["kind"] == "DaemonSet":  # the node agent: see test_agent_reads_rings_of_root_training_pods
                continue
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] != 0
            for c in spec.get("initContainers", []):  # root only to open hostPath dirs, no capabilities
                assert c["name"] == "prepare-node" and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
                assert c["securityContext"]["allowPrivilegeEscalation"] is False


# --- the node agent ---------------------------------------------------------------------------

def test_daemonset_mounts_the_ring_directory_on_gpu_nodes():
    docs = rendered(None)
    ds = one(docs, "DaemonSet", "-agent")
    spec = pod_spec(ds)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["rings"]["hostPath"] == {"path": "/run/commwatch/rings", "type": "DirectoryOrCreate"}
    agent = spec["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    cm = one(docs, "ConfigMap", RELEASE + "-commwatch")["data"]
    assert mounts["rings"] == cm["COMMWATCH_RING_DIR"] == "/run/commwatch/rings"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["COMMWATCH_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "hostNetwork" not in spec
    # the init container opens the ring dir to training pods and installs the NCCL plugin
    init = spec["initContainers"][0]
    assert {m["name"] for m in init["volumeMounts"]} == {"rings", "plugin"}
    assert "libnccl-profiler-commwatch.so" in " ".join(init["command"])
    assert volumes["plugin"]["hostPath"]["path"] == "/opt/commwatch/lib"


def test_agent_reads_rings_of_root_training_pods():
    spec = pod_spec(one(rendered(None), "DaemonSet", "-agent"))
    agent = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["COMMWATCH_AGENT_RING_UIDS"] == "any"
    assert spec["securityContext"]["runAsUser"] == 0  # reads and removes rings of any uid...
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}  # ...only that
    hardened = pod_spec(one(rendered(CHART / "ci" / "agent-uid-values.yaml"), "DaemonSet", "-agent"))
    c = hardened["containers"][0]
    assert {e["name"]: e.get("value") for e in c["env"]}["COMMWATCH_AGENT_RING_UIDS"] == "1000"
    assert hardened["securityContext"]["runAsUser"] == 1000 and hardened["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": []}


def test_agent_on_the_host_network():
    spec = pod_spec(one(rendered(CHART / "ci" / "agent-hostnetwork-values.yaml"), "DaemonSet", "-agent"))
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["runtimeClassName"] == "nvidia"
    port = spec["containers"][0]["ports"][0]
    assert port["containerPort"] == port["hostPort"] == 9465
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["COMMWATCH_METRICS_PORT"] == "9465"


def test_agents_only():
    docs = rendered(CHART / "ci" / "agents-only-values.yaml")
    assert {d["kind"] for d in docs if d["kind"] in WORKLOAD_KINDS} == {"DaemonSet"}
    spec = pod_spec(one(docs, "DaemonSet", "-agent"))
    assert "plugin" not in {v["name"] for v in spec["volumes"]}


# --- settings and credentials --------------------------------------------------------------

SENTINELS = ("kafka-sasl-s3cret", "kafka-key-s3cret", "clickhouse-s3cret", "webhook-s3cret", "slack-s3cret",
             "feishu-s3cret", "webhook-header-s3cret", "alertmanager-header-s3cret")


def test_credentials_land_in_secrets_only():
    docs = rendered(CHART / "ci" / "credentials-values.yaml")
    for doc in docs:
        if doc["kind"] == "Secret":
            continue
        text = yaml.safe_dump(doc)
        assert not [s for s in SENTINELS if s in text], doc["kind"] + " " + doc["metadata"]["name"]
    secret = secret_data(one(docs, "Secret", RELEASE + "-commwatch"))
    assert set(secret) == {env_key(f) for f in SECRET_FIELDS}
    assert all(any(s in v for s in SENTINELS) for v in secret.values())


@pytest.mark.parametrize("field", sorted(SECRET_FIELDS))
def test_settings_refuse_credentials(field):
    with pytest.raises(helm.HelmError, match=f"settings.{field} is a credential"):
        render({"settings": {field: "x"}})


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=IDS)
def test_configmap_and_secret_are_settings_commwatch_accepts(values_file):
    """What a container sees (ConfigMap + Secret + literal env) loads as commwatch Settings."""
    docs = rendered(values_file)
    cms = [d for d in kinds(docs, "ConfigMap") if not d["metadata"]["name"].startswith(
        f"{RELEASE}-commwatch-dashboard")]
    if not cms:
        return
    data = one(cms, "ConfigMap")["data"]
    assert set(data) <= KNOWN_ENV
    assert not {env_key(f) for f in SECRET_FIELDS} & set(data)
    secrets = kinds(docs, "Secret")
    for doc in docs:
        if doc["kind"] not in WORKLOAD_KINDS or doc["kind"] == "Job":
            continue
        container = pod_spec(doc)["containers"][0]
        env = dict(data)
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                owned = [s for s in secrets if s["metadata"]["name"] == source["secretRef"]["name"]]
                env.update(secret_data(owned[0]) if owned else {})
        env.update({e["name"]: e.get("value", "from-a-secret") for e in container.get("env", [])})
        env = {k: v for k, v in env.items() if k.startswith("COMMWATCH_")}
        settings = Settings.load(env=env)
        assert settings.kafka_bootstrap and settings.clickhouse_dsn
        assert settings.metrics_host == "0.0.0.0"


def test_extra_settings_reach_the_configmap():
    data = one(rendered(CHART / "ci" / "settings-values.yaml"), "ConfigMap", RELEASE + "-commwatch")["data"]
    assert Settings.load(env=data).hang_floor_s == 10.0
    assert data["COMMWATCH_LOG_LEVEL"] == "DEBUG"


def test_existing_secret_replaces_the_chart_secret():
    docs = rendered(CHART / "ci" / "existing-secret-values.yaml")
    assert not [d for d in kinds(docs, "Secret")]
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            refs = [s["secretRef"]["name"] for s in pod_spec(doc)["containers"][0].get("envFrom", [])
                    if "secretRef" in s]
            assert refs == ["commwatch-credentials"], doc["metadata"]["name"]


def test_kafka_tls_files_are_mounted_where_the_settings_point():
    docs = rendered(CHART / "ci" / "kafka-mtls-values.yaml")
    data = one(docs, "ConfigMap", RELEASE + "-commwatch")["data"]
    spec = pod_spec(one(docs, "Deployment", "-worker"))
    mount = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}["kafka-tls"]
    sources = {v["name"]: v for v in spec["volumes"]}["kafka-tls"]["projected"]["sources"]
    paths = {item["path"]: (src["secret"]["name"], item["key"]) for src in sources for item in src["secret"]["items"]}
    assert paths == {"ca.crt": ("kafka-cluster-ca-cert", "ca.crt"),
                     "client.crt": ("commwatch-kafka-client", "tls.crt"),
                     "client.key": ("commwatch-kafka-client", "tls.key")}
    assert data["COMMWATCH_KAFKA_SSL_CA_LOCATION"] == f"{mount}/ca.crt"
    assert data["COMMWATCH_KAFKA_SSL_CERTIFICATE_LOCATION"] == f"{mount}/client.crt"
    assert data["COMMWATCH_KAFKA_SSL_KEY_LOCATION"] == f"{mount}/client.key"


# --- the migration hook ------------------------------------------------------------------------

def test_migration_runs_as_a_pre_install_hook():
    docs = rendered(CHART / "ci" / "credentials-values.yaml")
    job = one(docs, "Job", "-migrate")
    ann = job["metadata"]["annotations"]
    assert set(ann["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
    container = pod_spec(job)["containers"][0]
    assert container["args"] == ["db", "migrate"]
    # at pre-install the release's ConfigMap and Secret do not exist yet: the Job uses neither
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["COMMWATCH_CLICKHOUSE_DSN"] == "https://clickhouse.example.internal:8443"
    hook_secret = one(docs, "Secret", "-migrate")
    assert [s["secretRef"]["name"] for s in container["envFrom"]] == [hook_secret["metadata"]["name"]]
    assert secret_data(hook_secret) == {"COMMWATCH_CLICKHOUSE_PASSWORD": "clickhouse-s3cret"}
    assert int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(ann["helm.sh/hook-weight"])
    assert hook_secret["metadata"]["annotations"]["helm.sh/hook"] == ann["helm.sh/hook"]
    assert "configMapRef" not in str(container)
    Settings.load(env={**{k: v for k, v in env.items() if v is not None}, **secret_data(hook_secret)})


def test_migration_reads_an_operator_password_secret():
    docs = rendered(CHART / "ci" / "altinity-clickhouse-values.yaml")
    container = pod_spec(one(docs, "Job", "-migrate"))["containers"][0]
    ref = {e["name"]: e for e in container["env"]}["COMMWATCH_CLICKHOUSE_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "clickhouse-credentials", "key": "password"}
    assert not kinds(docs, "Secret") or not [s for s in kinds(docs, "Secret") if s["metadata"]["name"].endswith(
        "-migrate")]


# --- monitoring objects -----------------------------------------------------------------------

def test_dashboards_ship_with_the_sidecar_label():
    docs = rendered(CHART / "ci" / "monitoring-values.yaml")
    shipped = {}
    for cm in kinds(docs, "ConfigMap"):
        if cm["metadata"]["labels"].get("grafana_dashboard") == "1":
            assert cm["metadata"]["namespace"] == "monitoring"
            assert cm["metadata"]["annotations"] == {"grafana_folder": "commwatch"}
            shipped.update(cm["data"])
    files = {p.name: p.read_text() for p in (ROOT / "deploy" / "grafana").glob("*.json")}
    assert files and {k: v.strip() for k, v in shipped.items()} == {k: v.strip() for k, v in files.items()}


def test_prometheus_rule_carries_the_rule_file():
    docs = rendered(CHART / "ci" / "monitoring-values.yaml")
    rule = one(docs, "PrometheusRule")
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "commwatch-rules.yaml").read_text())["groups"]
    assert rule["spec"]["groups"][: len(shipped)] == shipped
    assert rule["spec"]["groups"][-1]["name"] == "commwatch.site"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    sm = one(docs, "ServiceMonitor")
    targets = {r["targetLabel"] for r in sm["spec"]["endpoints"][0]["relabelings"]}
    assert {"component", "node"} <= targets  # the labels the rules and dashboards group by


# --- in-cluster Kafka and ClickHouse examples -----------------------------------------------------

def _example(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / "examples" / name).read_text()) if d]


def test_strimzi_values_name_what_the_strimzi_example_creates():
    kafka = one(_example("strimzi-kafka.yaml"), "Kafka")
    user = one(_example("strimzi-kafka.yaml"), "KafkaUser")
    values = _values(CHART / "ci" / "strimzi-values.yaml")["kafka"]
    cluster = kafka["metadata"]["name"]
    listener = next(l for l in kafka["spec"]["kafka"]["listeners"] if l["tls"])
    assert values["bootstrap"] == f"{cluster}-kafka-bootstrap:{listener['port']}"
    assert values["tls"]["caSecret"] == {"name": f"{cluster}-cluster-ca-cert", "key": "ca.crt"}
    assert values["sasl"]["existingPasswordSecret"] == {"name": user["metadata"]["name"], "key": "password"}
    assert values["sasl"]["username"] == user["metadata"]["name"]
    assert listener["authentication"]["type"] == user["spec"]["authentication"]["type"] == "scram-sha-512"
    assert values["sasl"]["mechanism"] == "SCRAM-SHA-512" and values["securityProtocol"] == "SASL_SSL"
    assert user["metadata"]["labels"]["strimzi.io/cluster"] == cluster
    prefixes = [a["resource"]["name"] for a in user["spec"]["authorization"]["acls"]
                if a["resource"]["type"] == "topic"]
    assert any(values["topicPrefix"].startswith(p) for p in prefixes)


def test_altinity_values_name_what_the_altinity_example_creates():
    chi = one(_example("altinity-clickhouse.yaml"), "ClickHouseInstallation")
    values = _values(CHART / "ci" / "altinity-clickhouse-values.yaml")["clickhouse"]
    assert values["dsn"] == f"http://clickhouse-{chi['metadata']['name']}:8123"
    users = chi["spec"]["configuration"]["users"]
    secret = values["existingPasswordSecret"]
    assert users[f"{values['user']}/k8s_secret_password"] == f"{secret['name']}/{secret['key']}"


# --- values.yaml documentation -------------------------------------------------------------------

def test_every_values_key_is_commented():
    """Every leaf key has a `# --` comment on itself or on an enclosing key (helm-docs style)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, bool]] = []  # (indent, documented) of enclosing keys
    undocumented = []
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z][\w.-]*):(.*)$", line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#") and not lines[j].strip().startswith("# --"):
            j -= 1
        documented = j >= 0 and lines[j].strip().startswith("# --") or any(d for _, d in stack)
        following = next((x for x in lines[i + 1:] if x.strip() and not x.strip().startswith("#")), "")
        is_group = rest == "" and not following.strip().startswith("- ")
        if not is_group and not documented:
            undocumented.append(f"line {i + 1}: {key}")
        stack.append((indent, documented))
    assert undocumented == []


def test_packaged_chart_carries_the_linked_dashboards_and_rules(tmp_path):
    archive = helm.package(CHART, destination=tmp_path)
    chart = helm.Chart.load_archive(Path(archive).read_bytes())
    out = chart.render({"prometheusRule": {"enabled": True}}, name=RELEASE, namespace=NAMESPACE)
    docs = [d for path, text in out.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text) if d]
    dashboards = [d for d in kinds(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(dashboards) == len(list((ROOT / "deploy" / "grafana").glob("*.json"))) >= 2
    assert one(docs, "PrometheusRule")["spec"]["groups"]


@pytest.mark.parametrize("values_file", [None, CHART / "ci" / "statefulset-values.yaml"], ids=["defaults", "sts"])
def test_container_args_are_commands_commwatch_knows(values_file):
    import importlib

    from commwatch.cli import COMMANDS, build_parser

    for doc in rendered(values_file):
        if doc["kind"] not in WORKLOAD_KINDS:
            continue
        args = pod_spec(doc)["containers"][0]["args"]
        parser, sub = build_parser()
        for name, (module, _help) in COMMANDS.items():
            p = sub.add_parser(name)
            if name == args[0]:
                importlib.import_module(module).add_arguments(p)
        assert parser.parse_args(args).command == args[0]

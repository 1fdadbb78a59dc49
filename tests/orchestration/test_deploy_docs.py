"""docs/deploy.md and docs/helm/: the Helm deployment on paper, checked where it can be without a
cluster. The values files validate against the official Airflow chart's schema (an excerpt, see
tests/fixtures/helm/README.md) with Kubernetes' own definitions, and use none of chart 1.22.0's
deprecated keys; the manifests validate against Kubernetes' schema (kubernetes_validate, strict);
and the pieces agree with each other and with the code: the kubernetes connection parses with
mxbench's own parser, its data volume is mounted where it says, the RBAC grants every API call the
launcher makes and binds the workers' account (the chart's own pod-launcher Role, which grants
pods/exec, is off), every Secret key the values reference is one step 3 creates or is optional,
image tags are per build, the bucket policy covers the artifact store's prefix, connections come
from Secrets only, and every setting the code reads is in docs/deploy.md. What is not checked: that
the chart renders them (no helm here) and that a real cluster accepts them."""
import copy
import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mxbench.launchers.kubernetes.pods import pod_settings
from mxbench.matrix.variants import DEFAULT_KUBERNETES_CONNECTION, DEFAULT_SSH_CONNECTIONS, machine_sets

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / "docs" / "helm"
DOC = REPO / "docs" / "deploy.md"
CHART_SCHEMA = REPO / "tests" / "fixtures" / "helm" / "airflow-chart-values.schema.excerpt.json"
K8S_VERSION = "1.34.0"  # as tests/orchestration/launchers/test_kubernetes_pods.py
CHART_VERSION = "1.22.0"  # the chart release the docs pin (helm ... --version)
VALUES = sorted(HELM.glob("values-*.yaml"))
MANIFESTS = sorted(set(HELM.glob("*.yaml")) - set(VALUES))
# the KubernetesExecutor's scheduler Role: applied only with values-kubernetes-executor.yaml
EXECUTOR_RBAC = HELM / "kubernetes-executor-rbac.yaml"
SECRET = "mxbench-connections"
# keys chart 1.22.0 deprecates (it warns on install): Celery worker settings moved to workers.celery.*
DEPRECATED_KEYS = [("workers", "replicas"), ("workers", "persistence"), ("workers", "hpa"), ("workers", "keda"),
                   ("workers", "volumeClaimTemplates"), ("workers", "schedulerName")]
# an environment variable the code sets for its own subprocess, not a setting
INTERNAL_SETTINGS = {"MXBENCH_SOURCE", "MXBENCH_CGROUP", "MXBENCH_CGROUP_UNAVAILABLE", "MXBENCH_CGROUP_SCOPE"}
# each Kubernetes API call the launcher may make (method of CoreV1Api) -> the (resource, verb) it needs
API_CALLS = {
    "create_namespaced_pod": ("pods", "create"),
    "read_namespaced_pod": ("pods", "get"),
    "list_namespaced_pod": ("pods", "list"),
    "delete_namespaced_pod": ("pods", "delete"),
    "delete_collection_namespaced_pod": ("pods", "deletecollection"),
    "read_namespaced_pod_log": ("pods/log", "get"),
    "connect_get_namespaced_pod_exec": ("pods/exec", "get"),
    "connect_post_namespaced_pod_exec": ("pods/exec", "create"),
    "list_namespaced_event": ("events", "list"),
    "read_node": ("nodes", "get"),
    "list_node": ("nodes", "list"),
}
# what the provider's PodManager does for the launcher (await_pod_start: read_pod, and the pod's events)
POD_MANAGER_CALLS = {"read_namespaced_pod", "list_namespaced_event"}


def load_yaml(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def values(path):
    (doc,) = load_yaml(path)
    return doc


def manifests(paths=None):
    """The documents of the manifests; by default those every deployment applies (not the executor's RBAC)."""
    return [doc for path in (paths or [p for p in MANIFESTS if p != EXECUTOR_RBAC]) for doc in load_yaml(path)]


def one(kind, docs=None):
    found = [d for d in (docs or manifests()) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in {[p.name for p in MANIFESTS]}, found {len(found)}"
    return found[0]


def env_of(vals):
    return {e["name"]: e["value"] for e in vals.get("env", [])}


def kubernetes_connection():
    return json.loads((HELM / "mxbench_kubernetes.json").read_text())


def chart_validator():
    """The chart's schema excerpt, its ``#/definitions/io.k8s...`` references served by the
    Kubernetes definitions that kubernetes_validate ships (the chart inlines the same ones)."""
    schema = json.loads(CHART_SCHEMA.read_text())
    defs_file = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict"
                 / "_definitions.json")
    k8s = json.loads(defs_file.read_text().replace('"#/$defs/', '"#/definitions/'))["$defs"]
    schema["definitions"] = {**k8s, **schema.get("definitions", {})}
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def validator():
    return chart_validator()


def errors(validator, vals):
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
            for e in validator.iter_errors(vals)]


def test_the_files_are_there():
    names = {p.name for p in HELM.iterdir()}
    assert {"values-celery.yaml", "values-kubernetes-executor.yaml", "pod-launcher-rbac.yaml", "bucket-policy.json",
            "mxbench-data-pvc.yaml", "mxbench_kubernetes.json", "kubernetes-executor-rbac.yaml"} <= names, names


@pytest.mark.parametrize("path", sorted(HELM.glob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_parses(path):
    docs = load_yaml(path)
    assert docs and all(isinstance(d, dict) for d in docs), f"{path.name}: not a YAML mapping per document"


@pytest.mark.parametrize("path", VALUES, ids=lambda p: p.name)
def test_values_validate_against_the_charts_schema(path, validator):
    vals = values(path)
    assert errors(validator, vals) == []
    # the chart's schema lets unknown top-level keys through: a misspelt one would be ignored silently
    unknown = set(vals) - set(validator.schema["properties"])
    assert not unknown, f"{path.name}: top-level keys the chart's schema (excerpt) does not know: {sorted(unknown)}"


def test_the_schema_check_catches_mistakes(validator):
    vals = values(HELM / "values-celery.yaml")
    misspelt = copy.deepcopy(vals)
    misspelt["workers"]["extraVolumeMount"] = misspelt["workers"].pop("extraVolumeMounts")
    assert any("extraVolumeMount" in e for e in errors(validator, misspelt))
    bad_volume = copy.deepcopy(vals)
    bad_volume["workers"]["extraVolumes"][1]["persistentVolumeClaim"]["claim"] = "mxbench-data"
    assert any("extraVolumes.1" in e for e in errors(validator, bad_volume))
    bad_env = copy.deepcopy(vals)
    bad_env["env"][1]["value"] = 2  # the chart wants strings: an unquoted number
    assert any(e.startswith("env.1.value") for e in errors(validator, bad_env))


@pytest.mark.parametrize("doc", manifests(MANIFESTS), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifests_are_valid_kubernetes(doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any unknown or mistyped field


def granted(rules):
    return {(resource, verb) for rule in rules for resource in rule["resources"] for verb in rule["verbs"]}


def test_rbac_grants_every_call_the_launcher_makes_and_no_more():
    code = "".join((REPO / "plugins" / "mxbench" / f).read_text()
                   for f in ("launchers/kubernetes/kubernetes_launcher.py", "launchers/kubernetes/role_pods.py",
                             "airflow_glue/operators.py"))
    calls = set(re.findall(r"client\.((?:create|read|list|delete|patch|replace|connect|watch)_\w+)\(", code))
    unknown = calls - set(API_CALLS)
    assert not unknown, f"API calls with no RBAC rule in this test: {unknown}; add them to API_CALLS and the Role"
    assert {"create_namespaced_pod", "read_namespaced_pod_log", "list_node"} <= calls  # the scan finds them
    needed = {API_CALLS[c] for c in calls | POD_MANAGER_CALLS}
    role, cluster_role = one("Role"), one("ClusterRole")
    have = granted(role["rules"]) | granted(cluster_role["rules"])
    assert needed <= have, f"missing: {sorted(needed - have)}"
    assert have <= needed, f"granted but never used: {sorted(have - needed)}"
    assert {r for r, _ in granted(cluster_role["rules"])} == {"nodes"}  # only the cluster-scoped part


def test_rbac_binds_the_workers_account_in_the_connections_namespace():
    namespace = kubernetes_connection()["extra"]["namespace"]
    docs = manifests()
    role, binding = one("Role", docs), one("RoleBinding", docs)
    cluster_binding = one("ClusterRoleBinding", docs)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert cluster_binding["roleRef"]["name"] == one("ClusterRole", docs)["metadata"]["name"]
    for path in VALUES:
        account = values(path)["workers"]["serviceAccount"]["name"]
        for b in (binding, cluster_binding):
            assert {"kind": "ServiceAccount", "name": account, "namespace": namespace} in b["subjects"], path.name


def test_role_pods_run_as_an_account_without_token_or_bindings():
    pod = pod_settings(DEFAULT_KUBERNETES_CONNECTION, kubernetes_connection()["extra"])
    account = one("ServiceAccount")
    assert account["metadata"]["name"] == pod.service_account
    assert account["automountServiceAccountToken"] is False and pod.automount_service_account_token is False
    subjects = [s["name"] for d in manifests() if d["kind"].endswith("Binding") for s in d["subjects"]]
    assert pod.service_account not in subjects


def test_the_data_volume_is_the_connections_and_mounted_apart_from_mxbench_home():
    conn = kubernetes_connection()
    assert conn["conn_type"] == "kubernetes" and conn["extra"]["in_cluster"] is True
    # mxbench's own parser: refuses what would not work
    pod = pod_settings(DEFAULT_KUBERNETES_CONNECTION, conn["extra"])
    pvc = one("PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == pod.data["pvc"]
    assert pvc["metadata"]["namespace"] == conn["extra"]["namespace"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # every worker and the role pods mount it
    home = re.search(r"^ENV MXBENCH_HOME=(\S+)$", (REPO / "docker" / "airflow.Dockerfile").read_text(), re.M).group(1)
    for path in VALUES:
        workers = values(path)["workers"]
        volumes = {v["name"]: v for v in workers["extraVolumes"]}
        mounts = {m["mountPath"]: m["name"] for m in workers["extraVolumeMounts"]}
        assert volumes[mounts[pod.local_data_root]]["persistentVolumeClaim"]["claimName"] == pod.data["pvc"], path.name
        assert "emptyDir" in volumes[mounts[home]], f"{path.name}: MXBENCH_HOME is each worker's own scratch"
        # caches are per worker (locks are local): the shared volume is never under MXBENCH_HOME
        assert not Path(pod.local_data_root).is_relative_to(home), path.name


def test_settings_come_from_env_and_connections_from_secrets_only():
    artifacts_conn = None
    for path in VALUES:
        vals = values(path)
        env = env_of(vals)
        secrets = {s["envName"] for s in vals["secret"]} | {e["name"] for e in vals["workers"].get("env", [])
                                                           if "secretKeyRef" in e.get("valueFrom", {})}
        url = re.fullmatch(r"s3://(\w+)@([a-z0-9.-]+)/(\S+)", env["MXBENCH_ARTIFACTS"])
        assert url, env["MXBENCH_ARTIFACTS"]
        artifacts_conn = url.group(1)
        assert int(env["AIRFLOW__CORE__DEFAULT_TASK_RETRIES"]) >= 1
        machine_sets({"MXBENCH_MACHINE_SETS": env["MXBENCH_MACHINE_SETS"]})  # raises on a set the DAG would refuse
        conn_ids = {*DEFAULT_SSH_CONNECTIONS, DEFAULT_KUBERNETES_CONNECTION, artifacts_conn,
                    vals["config"]["logging"]["remote_log_conn_id"], "mxbench_results"}
        for conn_id in conn_ids:
            assert conn_id.startswith("mxbench_")  # marked for mxbench by its id
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in secrets, f"{path.name}: {conn_id} is not set from a Secret"
        assert "MXBENCH_RESULTS_URL" in secrets  # it holds the database password
        in_clear = [n for n in env if n.startswith("AIRFLOW_CONN_")
                    or n in ("MXBENCH_RESULTS_URL", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")]
        assert not in_clear, f"{path.name}: set from a Secret, not in clear: {in_clear}"
        assert vals["data"]["metadataSecretName"] and vals["postgresql"]["enabled"] is False
    assert artifacts_conn == "mxbench_artifacts"


def test_bucket_policy_lets_the_store_and_the_logs_in_and_nothing_else():
    policy = json.loads((HELM / "bucket-policy.json").read_text())
    vals = values(HELM / "values-celery.yaml")
    bucket, prefix = re.fullmatch(r"s3://\w+@([^/]+)/(.+)", env_of(vals)["MXBENCH_ARTIFACTS"]).groups()
    log_folder = vals["config"]["logging"]["remote_base_log_folder"]
    log_bucket, log_prefix = re.fullmatch(r"s3://([^/]+)/(.+)", log_folder).groups()
    assert log_bucket == bucket

    def actions(statement):
        a = statement["Action"]
        return {a} if isinstance(a, str) else set(a)

    def resources(statement):
        r = statement["Resource"]
        return {r} if isinstance(r, str) else set(r)

    statements = policy["Statement"]
    assert all(s["Effect"] == "Allow" and "*" not in actions(s) and "s3:*" not in actions(s) for s in statements)
    for p in (prefix, log_prefix):
        objects = [s for s in statements if f"arn:aws:s3:::{bucket}/{p}/*" in resources(s)]
        assert objects and {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"} <= set().union(*map(actions, objects)), p
        listing = [s for s in statements if "s3:ListBucket" in actions(s) and f"arn:aws:s3:::{bucket}" in resources(s)]
        assert listing and all(f"{p}/*" in s["Condition"]["StringLike"]["s3:prefix"] for s in listing), p
    # no statement reaches the whole bucket's objects
    assert not any(r.endswith(f":::{bucket}/*") for s in statements for r in resources(s))


def settings_read_by_the_code():
    """Every MXBENCH_* variable the code names, and every Airflow setting of its own section
    (``conf.get("mxbench", "key")``) as the variable that sets it, AIRFLOW__MXBENCH__KEY."""
    names = set()
    for folder in ("plugins", "dags", "tasks"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text()
            names |= set(re.findall(r"[\"'](MXBENCH_[A-Z0-9_]+)[\"']", text))
            names |= {f"AIRFLOW__MXBENCH__{key.upper()}"
                      for key in re.findall(r"conf\.get\w*\(\s*[\"']mxbench[\"'],\s*[\"'](\w+)[\"']", text)}
    return names - INTERNAL_SETTINGS


def test_the_doc_names_every_setting_connection_and_file():
    doc = DOC.read_text()
    settings = settings_read_by_the_code()
    assert {"MXBENCH_ARTIFACTS", "MXBENCH_HOME", "MXBENCH_RESULTS_URL",
            "AIRFLOW__MXBENCH__QUIET_WAIT_S"} <= settings  # the scan works
    missing = sorted(s for s in settings | {"AIRFLOW__CORE__DEFAULT_TASK_RETRIES"} if s not in doc)
    assert not missing, f"docs/deploy.md does not mention: {missing}"
    conn_ids = {*DEFAULT_SSH_CONNECTIONS, DEFAULT_KUBERNETES_CONNECTION, "mxbench_artifacts", "mxbench_results"}
    assert not [c for c in conn_ids if c not in doc]
    assert not [p.name for p in HELM.iterdir() if f"docs/helm/{p.name}" not in doc]
    named = set(re.findall(r"docs/helm/([\w.-]+)", doc))
    assert not [n for n in named if not (HELM / n).exists()], "docs/deploy.md names files that are not there"


# --- what would break a first install ------------------------------------------------------

def secret_key_refs(vals):
    """(env var, Secret, key, optional) of every Secret key the values reference: the chart's
    `secret:` list (which cannot mark a key optional) and any valueFrom.secretKeyRef below."""
    refs = [(s["envName"], s["secretName"], s.get("secretKey", "value"), False) for s in vals.get("secret", [])]

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("valueFrom"), dict) and "secretKeyRef" in node["valueFrom"]:
                ref = node["valueFrom"]["secretKeyRef"]
                refs.append((node["name"], ref["name"], ref["key"], ref.get("optional", False)))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk({k: v for k, v in vals.items() if k != "secret"})
    return refs


def documented_secret_keys(doc, secret):
    """(always created, created only when their file was written) keys of the doc's
    `kubectl create secret generic <secret> ...` command, continuation lines joined."""
    text = doc.replace("\\\n", " ")
    commands = [line for line in text.splitlines() if re.search(rf"create secret generic {secret}\b", line)]
    assert len(commands) == 1, f"docs/deploy.md: expected one command creating Secret {secret}, found {commands}"
    command = commands[0]
    loop = re.search(r"\$\(for (\w+) in ([\w ]+); do (.*?); done\)", command)
    optional = set(loop.group(2).split()) if loop else set()
    if loop:
        # the loop adds --from-file for each key whose file exists, and only then
        assert re.search(rf'\[ -f "\${loop.group(1)}" \].*--from-file=\${loop.group(1)}', loop.group(3)), loop.group(0)
        command = command.replace(loop.group(0), "")
    return set(re.findall(r"--from-file=(\w+)", command)), optional


@pytest.mark.parametrize("path", VALUES, ids=lambda p: p.name)
def test_every_secret_key_the_values_reference_is_created_or_optional(path):
    """A referenced key the Secret lacks stops the migration job and every pod
    (CreateContainerConfigError) unless the reference is optional: a team with one SSH host, none,
    or no Kubernetes runs writes only the files it has (step 3), and the install still comes up."""
    always, when_written = documented_secret_keys(DOC.read_text(), SECRET)
    refs = [r for r in secret_key_refs(values(path)) if r[1] == SECRET]
    assert refs, "the scan finds the values' references"
    for env, _, key, optional in refs:
        if optional:
            assert key in always | when_written, f"{path.name}: {env} reads {key}, which step 3 never creates"
        else:
            assert key in always, (f"{path.name}: {env} requires key {key}, which step 3 creates only sometimes or "
                                   "never: make it optional (workers.env, secretKeyRef.optional) or always create it")
    # the launchers' connections are the optional ones: a team may have no SSH hosts or no cluster for role pods
    optional_envs = {env for env, _, _, optional in refs if optional}
    launchers = {f"AIRFLOW_CONN_{c.upper()}" for c in (*DEFAULT_SSH_CONNECTIONS, DEFAULT_KUBERNETES_CONNECTION)}
    assert launchers <= optional_envs, f"{path.name}: required launcher connections {sorted(launchers - optional_envs)}"


def test_the_secret_check_catches_a_required_key_that_may_be_missing():
    vals = values(HELM / "values-celery.yaml")
    required_ssh = copy.deepcopy(vals)
    required_ssh["secret"].append({"envName": "AIRFLOW_CONN_MXBENCH_SSH_2", "secretName": SECRET,
                                   "secretKey": "mxbench_ssh_2"})
    always, _ = documented_secret_keys(DOC.read_text(), SECRET)
    missing = [key for _, name, key, optional in secret_key_refs(required_ssh)
               if name == SECRET and not optional and key not in always]
    assert missing == ["mxbench_ssh_2"]


@pytest.mark.parametrize("path", VALUES, ids=lambda p: p.name)
def test_values_use_no_key_the_chart_deprecates(path):
    vals = values(path)
    used = [".".join(key) for key in DEPRECATED_KEYS if key[1] in vals.get(key[0], {})]
    assert not used, f"{path.name}: deprecated in chart {CHART_VERSION} (use workers.celery.*): {used}"


def test_the_chart_pod_launcher_role_is_off_and_ours_never_execs():
    """The chart's pod-launcher Role grants pods/exec and binds it to the workers' account: it is
    off (allowPodLaunching: false) in both values files. Under the KubernetesExecutor the scheduler
    still launches each task's pod, with the Role of kubernetes-executor-rbac.yaml, bound to the
    account the values name."""
    for path in VALUES:
        assert values(path)["allowPodLaunching"] is False, path.name
    roles = [doc for doc in manifests(MANIFESTS) if doc["kind"] in ("Role", "ClusterRole")]
    every_rule = [rule for doc in roles for rule in doc["rules"]]
    assert not [r for r in every_rule if "pods/exec" in r["resources"] or "*" in r["resources"] + r["verbs"]]
    docs = manifests([EXECUTOR_RBAC])
    role, binding = one("Role", docs), one("RoleBinding", docs)
    assert {("pods", verb) for verb in ("create", "get", "list", "watch", "patch", "delete")} <= granted(role["rules"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    executor = values(HELM / "values-kubernetes-executor.yaml")
    namespace = kubernetes_connection()["extra"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": executor["scheduler"]["serviceAccount"]["name"],
                                    "namespace": namespace}]
    assert "scheduler" not in values(HELM / "values-celery.yaml")  # Celery: the scheduler launches no pods
    doc = DOC.read_text()
    assert "kubectl apply -f docs/helm/kubernetes-executor-rbac.yaml" in doc


def test_image_tags_are_per_build():
    """The chart pulls IfNotPresent, and so does Kubernetes for a role pod's tagged image: a tag
    reused for a rebuilt image never reaches a node that has the old one. Each build gets its own
    tag, <version>-<commit>, or the values name a digest."""
    for path in VALUES:
        vals = values(path)
        if vals.get("defaultAirflowDigest"):
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", vals["defaultAirflowDigest"]), path.name
            continue
        assert re.fullmatch(rf"{re.escape(vals['airflowVersion'])}-[0-9a-f]{{7,40}}", vals["defaultAirflowTag"]), \
            f"{path.name}: defaultAirflowTag {vals['defaultAirflowTag']!r} is not <airflowVersion>-<commit>"
        assert vals.get("images", {}).get("airflow", {}).get("pullPolicy", "IfNotPresent") == "IfNotPresent"
    image = kubernetes_connection()["extra"]["mxbench_pod"]["image"]
    assert re.search(r"(:[\w.-]+-[0-9a-f]{7,40}|@sha256:[0-9a-f]{64})$", image), f"mxbench_kubernetes image {image}"
    readme = (REPO / "docker" / "README.md").read_text()
    assert "git rev-parse --short HEAD" in readme


def helm_commands(doc):
    text = doc.replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if re.match(r"\s*helm (upgrade|install|template|lint)\b", line)]


def test_the_doc_pins_the_chart_version_it_was_checked_against():
    doc = DOC.read_text()
    commands = helm_commands(doc)
    assert commands, "docs/deploy.md has no helm install"
    for command in commands:
        assert f"--version {CHART_VERSION}" in command, command
    assert "helm repo add apache-airflow https://airflow.apache.org" in doc


def test_the_doc_says_how_the_first_login_works():
    """The chart's default auth makes an admin user, password admin: the doc says so, and how to change it."""
    doc = DOC.read_text()
    assert re.search(r"`admin`.*password `admin`", doc), "docs/deploy.md: the chart's first login, admin/admin"
    assert "airflow users reset-password" in doc


def test_the_doc_covers_teams_with_one_ssh_host_none_or_only_kubernetes():
    doc = DOC.read_text()
    for case in ("one SSH host", "no SSH host", "only Kubernetes"):
        assert case in doc, f"docs/deploy.md does not cover a team with {case}"
    assert '"ssh_connections": ["mxbench_ssh_1"]' in doc  # the param's default names two hosts

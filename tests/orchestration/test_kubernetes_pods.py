"""The Kubernetes launcher's pure parts: settings, role pods (strictly valid manifests), the
outputs block a pod prints at exit, and the k8s/ssh gap split. The launcher against an API
server is tests/dags/test_dag_kubernetes.py."""
import io
import json
import re
import subprocess
import sys
import tarfile

import kubernetes_validate
import pandas as pd
import pytest

from mxbench.jobs import job_for
from mxbench.launchers.kubernetes import (DATA_MOUNT, RUN_DIR, pod_data_dir, pod_settings, pod_template, role_pod,
                                          run_id)
from mxbench.metrics import kubernetes_gap
from mxbench.variants import Target, expand_runs, preset
from mxbench_train.errors import MxbenchError
from mxbench_train.pod_outputs import BundleError, split_log, unpack
from mxbench_train.roles import plan_roles

K8S_VERSION = "1.34.0"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def settings(**pod):
    extra = {"mxbench_pod": {"image": "mxbench-train:cu112", "data": {"host_path": "/srv/mxbench/data"}, **pod}}
    return pod_settings("mxbench_kubernetes", extra, namespace="bench")


def pods_for(variant_id, preset_name="seed-k8s", host_network=False, **pod):
    variant = next(v for v in preset(preset_name) if v.id == variant_id)
    s = settings(**pod)
    job = job_for(variant, data_dir=pod_data_dir(s, "/srv/mxbench/data/rec-x"), log_dir=RUN_DIR, python=s.python,
                  hosts=["node-a", "node-b"][:variant.hosts], port=s.port, cores_per_host=8, split_host_gpus=False)
    plan = plan_roles(job)
    return {role.name: role_pod(pod_template(s), role, run="0123456789abcdef", attempt="a1b2c3",
                                run_key=f"{variant.id}__kubernetes__r1", settings=s,
                                gpus=variant.gpus_per_worker if role.kind == "worker" else 0,
                                host_network=host_network or variant.host_network, scheduler_ip="10.1.2.3",
                                deadline_s=3600)
            for role in plan}


def env_of(pod):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_role_pods_are_strictly_valid_and_wired_as_ps_lite_needs():
    pods = pods_for("dist-2x4gpu-b128", requests={"cpu": "8", "memory": "32Gi"}, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], image_pull_secrets=["regcred"],
        service_account="mxbench")
    assert set(pods) == {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}
    for name, pod in pods.items():
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)  # raises on any unknown or mistyped field
        assert DNS_LABEL.match(pod["metadata"]["name"]) and len(pod["metadata"]["name"]) <= 63
        assert pod["metadata"]["labels"]["mxbench.io/run"] == "0123456789abcdef"
        assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["activeDeadlineSeconds"] == 3660
        command = pod["spec"]["containers"][0]["command"]
        assert command[:6] == ["python", "-m", "mxbench_train", "pod-role", "--outputs", RUN_DIR]
    pod_ip = {"fieldRef": {"fieldPath": "status.podIP"}}
    scheduler, worker = env_of(pods["scheduler"]), env_of(pods["worker-1"])
    assert scheduler["DMLC_PS_ROOT_URI"] == pod_ip and scheduler["DMLC_NODE_HOST"] == pod_ip
    assert worker["DMLC_PS_ROOT_URI"] == "10.1.2.3" and worker["DMLC_NODE_HOST"] == pod_ip
    assert worker["DMLC_ROLE"] == "worker" and worker["DMLC_NUM_WORKER"] == "2"
    limits = pods["worker-0"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "4"}
    assert "nvidia.com/gpu" not in pods["server-0"]["spec"]["containers"][0]["resources"].get("limits", {})
    assert pods["worker-0"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-a"
    assert pods["worker-1"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-b"
    argv = pods["worker-0"]["spec"]["containers"][0]["command"]
    assert "--gpus" in argv and argv[argv.index("--gpus") + 1] == "0,1,2,3"  # 0..k-1 of the pod's own GPUs
    assert argv[argv.index("--data-train") + 1] == f"{DATA_MOUNT}/rec-x/cifar10_train.rec"
    assert "hostNetwork" not in pods["worker-0"]["spec"]


def test_the_hostnet_twin_runs_on_the_node_network_under_kubernetes_only():
    pods = pods_for("dist-2x4gpu-b128-hostnet")
    for pod in pods.values():
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        assert pod["spec"]["hostNetwork"] is True and pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    params = {"preset": "seed-k8s", "launchers": ["ssh", "kubernetes"], "repeats": 1}
    targets = {name: Target(name, hosts=2, gpus_per_host=8) for name in ("ssh", "kubernetes")}
    runs = expand_runs(params, targets, sets={"gpu": ("local", "ssh", "kubernetes")})
    twins = [r for r in runs if r["variant"]["host_network"]]
    assert twins and {r["launcher"] for r in twins} == {"kubernetes"}
    assert len(runs) == 6 * 2 + 2


def test_each_worker_pod_numbers_its_own_gpus_from_zero():
    pods = pods_for("dist-1x4gpu-b128")
    workers = [p for name, p in pods.items() if name.startswith("worker-")]
    assert len(workers) == 4
    for pod in workers:
        command = pod["spec"]["containers"][0]["command"]
        assert command[command.index("--gpus") + 1] == "0"
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_a_single_worker_pod_has_no_ps_lite_wiring():
    pods = pods_for("device-4gpu-b128")
    assert list(pods) == ["worker-0"]
    env = env_of(pods["worker-0"])
    assert "DMLC_ROLE" not in env and "DMLC_PS_ROOT_URI" not in env
    kubernetes_validate.validate(pods["worker-0"], K8S_VERSION, strict=True)


@pytest.mark.parametrize("pod, message", [
    ({"data": None}, "mxbench_pod.data"),
    ({"port": "9091"}, "mxbench_pod.port"),
    ({"data": {"pvc": "x"}}, "mxbench_pod.data"),  # a claim needs local_path: where Airflow sees the files
    ({"nodes": "node-a"}, "mxbench_pod.nodes"),
    ({"imagee": "typo"}, "imagee"),
    ({"env": {"TOKEN": ["s3cr3t"]}}, "mxbench_pod.env.TOKEN: breaks the rule type"),
])
def test_bad_pod_settings_are_refused_by_name(pod, message):
    with pytest.raises(MxbenchError, match=re.escape(message)) as refused:
        settings(**pod)
    assert "s3cr3t" not in str(refused.value)  # a bad value is never quoted: it may be a secret


def test_settings_need_an_image_and_the_param_overrides_it():
    with pytest.raises(MxbenchError, match="no mxbench_pod object"):
        pod_settings("k", {})
    with pytest.raises(MxbenchError, match="no training image"):
        pod_settings("k", {"mxbench_pod": {"data": {"host_path": "/d"}}})
    s = pod_settings("k", {"mxbench_pod": json.dumps({"image": "a:1", "data": {"host_path": "/d"}})}, image="b:2")
    assert s.image == "b:2" and s.namespace == "default"


def test_the_data_set_must_be_on_the_data_volume(tmp_path):
    s = settings(data={"host_path": str(tmp_path)})
    (tmp_path / "rec-1").mkdir()
    assert pod_data_dir(s, tmp_path / "rec-1") == f"{DATA_MOUNT}/rec-1"
    with pytest.raises(MxbenchError, match="not under the data volume"):
        pod_data_dir(s, "/elsewhere/rec-1")


def test_run_labels_are_the_same_on_every_attempt_and_differ_between_runs(tmp_path):
    a = run_id(tmp_path / "dag-run-1" / "cpu1__kubernetes__r1")
    assert a == run_id(tmp_path / "dag-run-1" / "cpu1__kubernetes__r1")
    assert a != run_id(tmp_path / "dag-run-2" / "cpu1__kubernetes__r1")
    assert a != run_id(tmp_path / "dag-run-1" / "cpu1__kubernetes__r2")


def test_pod_role_prints_its_outputs_and_passes_the_exit_code_on(tmp_path):
    out = tmp_path / "run"
    script = f"import pathlib; pathlib.Path({str(out)!r}, 'rank0.log').write_text('Epoch[0] ok\\n'); print('hi'); exit(3)"
    done = subprocess.run([sys.executable, "-m", "mxbench_train", "pod-role", "--outputs", str(out), "--",
                           sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    kept, data, skipped = split_log(done.stdout.splitlines())
    assert kept == ["hi"] and skipped == []
    dest = tmp_path / "back"
    assert unpack(data, dest) == ["rank0.log"]
    assert (dest / "rank0.log").read_text() == "Epoch[0] ok\n"
    with pytest.raises(BundleError, match="cut off"):
        split_log(done.stdout.splitlines()[:-1])
    tampered = done.stdout.splitlines()
    tampered[2] = tampered[2][:-4] + ("AAAA" if not tampered[2].endswith("AAAA") else "BBBB")
    with pytest.raises((BundleError, ValueError)):
        split_log(tampered)


def test_unpack_writes_nothing_outside_the_run_folder_nor_over_the_launchers_records(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("../escape.txt", "meta.json", "rank0.log"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
    dest = tmp_path / "run"
    dest.mkdir()
    (dest / "meta.json").write_text("{}")
    assert unpack(buffer.getvalue(), dest, keep={"meta.json"}) == ["rank0.log"]
    assert not (tmp_path / "escape.txt").exists() and (dest / "meta.json").read_text() == "{}"


def runs_frame(speeds):
    rows = []
    for (variant, launcher), values in speeds.items():
        rows += [{"variant": variant, "launcher": launcher, "status": "ok", "samples_per_sec": v} for v in values]
    return pd.DataFrame(rows)


def test_the_gap_splits_into_container_and_network_parts():
    ssh = [100.0, 101.0, 99.0, 100.5, 99.5]
    host_net = [99.8, 100.6, 99.2, 100.1, 99.9]  # hostNetwork pods: as fast as ssh
    pod_net = [90.0, 91.0, 89.5, 90.5, 90.2]  # the pod network costs 10%
    gap = kubernetes_gap(runs_frame({("v", "ssh"): ssh, ("v-hostnet", "kubernetes"): host_net,
                                     ("v", "kubernetes"): pod_net}))
    by_part = gap.set_index("part")
    assert list(gap["part"]) == ["whole gap", "container", "network"]
    assert by_part.loc["whole gap", "outcome"] == "slower"
    assert by_part.loc["container", "outcome"] == "within noise"
    assert by_part.loc["network", "outcome"] == "slower"
    assert by_part.loc["network", "ratio"] == pytest.approx(90.2 / 99.9, rel=1e-3)
    assert kubernetes_gap(runs_frame({("v", "ssh"): ssh, ("v", "kubernetes"): pod_net})).empty  # no twin ran

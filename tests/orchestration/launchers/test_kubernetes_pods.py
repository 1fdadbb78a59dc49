"""The Kubernetes launcher's pure parts: settings, role pods (strictly valid manifests), the
outputs block a pod prints at exit, and the k8s/ssh gap split. The launcher against an API
server is tests/dags/test_dag_kubernetes.py."""
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tracemalloc
import zlib

import kubernetes_validate
import pandas as pd
import pytest

from mxbench.launchers.base import LOCAL_ONLY
from mxbench.launchers.kubernetes.pods import (
    DATA_MOUNT,
    RUN_DIR,
    pod_data_dir,
    pod_network_of,
    pod_network_read,
    pod_settings,
    pod_template,
    role_pod,
    run_label,
)
from mxbench.matrix.jobs import job_for
from mxbench.matrix.variants import Target, VariantError, expand_runs, preset
from mxbench.results.metrics import kubernetes_gap
from mxbench.run_folder import DagRunFolder
from mxbench_train import localhost
from mxbench_train.errors import MxbenchError
from mxbench_train.pod_outputs import (
    BEGIN,
    END,
    HEADER_BYTES_PER_MEMBER,
    MAX_HEADER_RECORD_BYTES,
    BundleError,
    OutputsBlock,
    unpack,
)
from mxbench_train.role_log import lines_of
from mxbench_train.role_plan import plan_roles

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
    for pod in pods.values():
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
    targets = {"ssh": Target("ssh", hosts=2, gpus_per_host=8),
               "kubernetes": Target("kubernetes", hosts=2, gpus_per_host=8, host_network=True)}
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
    s = pod_settings("k", {"mxbench_pod": json.dumps({"image": "a:1", "data": {"host_path": "/d"},
                                                      "allowed_images": ["b:*"]})}, image="b:2")
    assert s.image == "b:2" and s.namespace == "default"


def test_the_data_set_must_be_on_the_data_volume(tmp_path):
    s = settings(data={"host_path": str(tmp_path)})
    (tmp_path / "rec-1").mkdir()
    assert pod_data_dir(s, tmp_path / "rec-1") == f"{DATA_MOUNT}/rec-1"
    with pytest.raises(MxbenchError, match="not under the data volume"):
        pod_data_dir(s, "/elsewhere/rec-1")


def test_run_labels_are_the_same_on_every_attempt_and_differ_between_runs(tmp_path):
    a = run_label(DagRunFolder(tmp_path / "dag-run-1").run("cpu1__kubernetes__r1"))
    assert a == run_label(DagRunFolder(tmp_path / "dag-run-1").run("cpu1__kubernetes__r1"))
    assert a != run_label(DagRunFolder(tmp_path / "dag-run-2").run("cpu1__kubernetes__r1"))
    assert a != run_label(DagRunFolder(tmp_path / "dag-run-1").run("cpu1__kubernetes__r2"))


def read_log(lines):
    """A pod log as the launcher reads it: (its own lines, the bundle's bytes or None, files left out)."""
    block = OutputsBlock()
    kept = [line for line in lines if block.feed(line)]
    return (kept, *block.result())


def test_pod_role_prints_its_outputs_and_passes_the_exit_code_on(tmp_path):
    out = tmp_path / "run"
    script = (f"import pathlib; pathlib.Path({str(out)!r}, 'rank0.log').write_text('Epoch[0] ok\\n'); "
              "print('hi'); exit(3)")
    done = subprocess.run([sys.executable, "-m", "mxbench_train", "pod-role", "--outputs", str(out), "--",
                           sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOSTNAME": "mxb-pod-x"})
    assert done.returncode == 3
    kept, data, skipped = read_log(done.stdout.splitlines())
    assert kept == ["hi"] and skipped == []
    dest = tmp_path / "back"
    assert sorted(unpack(data, dest)) == ["pod-network/mxb-pod-x.json", "rank0.log"]
    assert (dest / "rank0.log").read_text() == "Epoch[0] ok\n"
    # what the pod read of its own network, for the report (here: this process's namespace)
    reading = json.loads((dest / "pod-network" / "mxb-pod-x.json").read_text())
    assert reading == {"netns": localhost.network_namespace(), "interfaces": localhost.interfaces()}
    with pytest.raises(BundleError, match="cut off"):
        read_log(done.stdout.splitlines()[:-1])
    tampered = done.stdout.splitlines()
    tampered[2] = tampered[2][:-4] + ("AAAA" if not tampered[2].endswith("AAAA") else "BBBB")
    with pytest.raises((BundleError, ValueError)):
        read_log(tampered)


def test_a_hostnet_variant_is_refused_by_name_where_the_cluster_does_not_allow_host_network():
    params = {"preset": "seed-k8s", "launchers": ["ssh", "kubernetes"], "repeats": 1}
    targets = {name: Target(name, hosts=2, gpus_per_host=8) for name in ("ssh", "kubernetes")}
    with pytest.raises(VariantError) as refused:
        expand_runs(params, targets, sets={"gpu": ("local", "ssh", "kubernetes")})
    lines = str(refused.value).split("; ")
    assert lines == [f"variant dist-2x4gpu-b{b}-hostnet runs its pods on the host network, which the kubernetes "
                     "target does not allow (mxbench_pod.allow_host_network of the kubernetes_connection)"
                     for b in (128, 256)]
    runs = expand_runs({**params, "preset": "seed-k8s", "only_variants": ["dist-2x4gpu-b128"]}, targets,
                       sets={"gpu": ("local", "ssh", "kubernetes")})
    assert len(runs) == 2  # the pod-network variant alone is fine


def test_the_kubernetes_image_param_must_match_the_connections_allowed_images():
    base = {"image": "registry.example.com/mxbench-train:1.9.1", "data": {"host_path": "/d"}}
    with pytest.raises(MxbenchError) as refused:  # default: the connection's own image only
        pod_settings("mxbench_kubernetes", {"mxbench_pod": base}, image="attacker.io/miner:latest")
    assert str(refused.value) == (
        "kubernetes connection 'mxbench_kubernetes': the kubernetes_image param 'attacker.io/miner:latest' is not "
        "allowed: mxbench_pod.allowed_images (none besides mxbench_pod.image) does not match it")
    assert pod_settings("k", {"mxbench_pod": base}, image=base["image"]).image == base["image"]
    allowing = {"mxbench_pod": {**base, "allowed_images": ["registry.example.com/mxbench-train:*"]}}
    assert pod_settings("k", allowing, image="registry.example.com/mxbench-train:1.8.0").image.endswith(":1.8.0")
    for image in ("registry.example.com/mxbench-train-evil:1", "registry.example.com.evil.io/mxbench-train:1",
                  "REGISTRY.EXAMPLE.COM/mxbench-train:1", "attacker.io/registry.example.com/mxbench-train:1"):
        with pytest.raises(MxbenchError,
                           match=r"mxbench_pod.allowed_images \('registry.example.com/mxbench-train:\*'\)"):
            pod_settings("k", allowing, image=image)


def test_host_network_needs_the_connection_to_allow_it():
    with pytest.raises(MxbenchError,
                       match="mxbench_pod.host_network is true but mxbench_pod.allow_host_network is not"):
        settings(host_network=True)
    assert not settings().allow_host_network
    assert settings(host_network=True, allow_host_network=True).host_network


def test_role_pods_mount_no_service_account_token_unless_the_settings_ask():
    for pod in pods_for("dist-2x4gpu-b128").values():
        assert pod["spec"]["automountServiceAccountToken"] is False
    template = pod_template(settings())
    template["spec"]["automountServiceAccountToken"] = True  # as a pod template file may say
    plan = plan_roles(job_for(preset("seed-k8s")[0], data_dir=DATA_MOUNT, log_dir=RUN_DIR, python="python",
                              hosts=["node-a"], port=9091, cores_per_host=8, split_host_gpus=False))
    pod = role_pod(template, plan[0], run="0123456789abcdef", attempt="a1b2c3", run_key="k", settings=settings(),
                   gpus=0, host_network=False, scheduler_ip=None, deadline_s=60)
    assert pod["spec"]["automountServiceAccountToken"] is False
    for pod in pods_for("dist-2x4gpu-b128", automount_service_account_token=True).values():
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        assert pod["spec"]["automountServiceAccountToken"] is True


def tar_gz(members):
    """[(name, bytes)] as a tar.gz; None for the bytes makes a symlink to /etc/passwd."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
                continue
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_unpack_normalises_names_before_the_keep_list_and_refuses_by_name(tmp_path):
    dest = tmp_path / "run"
    (dest / "roles").mkdir(parents=True)
    records = {"meta.json": '{"status": "ok"}', "pids.json": '{"worker-0": {}}', "kubernetes.json": "{}",
               "roles/worker-0.log": "streamed\n"}
    for name, text in records.items():
        (dest / name).write_text(text)
    data = tar_gz([("rank0.log", b"ok\n"), ("./meta.json", b"forged"), ("x/../pids.json", b"forged"),
                   ("./roles/../kubernetes.json", b"forged"), ("roles//worker-0.log", b"forged"),
                   ("../escape", b"out"), (str(tmp_path / "absolute"), b"out"), ("a/../../escape2", b"out"),
                   ("link", None)])
    with pytest.raises(BundleError) as refused:
        unpack(data, dest, keep=LOCAL_ONLY | {"roles", "kubernetes.json"})
    message = str(refused.value)
    assert message.startswith("files of the outputs were refused: './meta.json' would overwrite the launcher's own "
                              "records; 'x/../pids.json' would overwrite the launcher's own records; "
                              "'./roles/../kubernetes.json' would overwrite the launcher's own records (and 5 more)")
    for name, text in records.items():
        assert (dest / name).read_text() == text
    assert (dest / "rank0.log").read_text() == "ok\n"  # the genuine file still comes back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert not (dest / "link").exists()


def test_unpack_stops_at_its_caps_while_extracting(tmp_path):
    dest = tmp_path / "run"
    dest.mkdir()
    with pytest.raises(BundleError, match="'big.log' is over 1000 bytes"):
        unpack(tar_gz([("small.log", b"x" * 10), ("big.log", b"x" * 1001)]), dest, max_member=1000)
    assert not (dest / "big.log").exists()
    with pytest.raises(BundleError, match="the outputs expand past 2500 bytes: nothing more was unpacked"):
        unpack(tar_gz([(f"rank{i}.log", b"x" * 1000) for i in range(5)]), dest, max_member=1000, max_total=2500)
    assert sorted(p.name for p in dest.iterdir()) == ["rank0.log", "rank1.log", "small.log"]
    with pytest.raises(BundleError, match="more than 3 files"):
        unpack(tar_gz([(f"f{i}", b"") for i in range(4)]), dest, max_members=3)
    with pytest.raises(BundleError, match="cannot be unpacked"):
        unpack(b"not a tar.gz", dest)


def test_a_bundle_that_expands_1000_to_1_is_refused_without_reading_it(tmp_path):
    # 300 MiB of zeros in a few hundred KiB: the default cap (256 MiB) refuses it from the sizes the
    # members declare, before decompressing them, and nothing is held in memory meanwhile
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("rank0.log"), io.BytesIO())
        info = tarfile.TarInfo("gpu-rank0.csv")
        info.size = 300 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    data = buffer.getvalue()
    assert len(data) < 1 << 20
    dest = tmp_path / "run"
    dest.mkdir()
    tracemalloc.start()
    try:
        with pytest.raises(BundleError, match="expand past 268435456 bytes"):
            unpack(data, dest)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 << 20  # tarfile inflates about 10 KiB of input at a time: 10 MiB of zeros at most
    assert sum(p.stat().st_size for p in dest.iterdir()) == 0


def gzip_of(*pieces):
    """A gzip of the byte strings, an int piece meaning that many zeros (compressed as they come)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = []
    for piece in pieces:
        if isinstance(piece, int):
            out += [deflate.compress(bytes(1 << 20)) for _ in range(piece >> 20)]
        else:
            out.append(deflate.compress(piece))
    return b"".join(out) + deflate.flush()


def header_record(kind, size):
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def a_member(name=b"rank0.log"):
    info = tarfile.TarInfo(name.decode())
    info.size = 3
    return info.tobuf(format=tarfile.GNU_FORMAT) + b"ok\n".ljust(512, b"\0") + bytes(1024)


def peak_memory(call):
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE], ids=["gnu-long-name", "pax"])
def test_a_header_record_of_512_MiB_is_refused_from_its_declared_size(tmp_path, kind):
    # tarfile reads a long name or pax record whole before unpack sees its member: 0.5 MB of gzip
    # claiming a 512 MiB name once took 1 GB of the worker's memory, then failed as "'' leaves the run folder"
    data = gzip_of(header_record(kind, 512 << 20), 512 << 20, a_member())
    assert len(data) < 1 << 20
    dest = tmp_path / "run"
    dest.mkdir()

    def refused():
        with pytest.raises(BundleError) as error:
            unpack(data, dest)
        assert str(error.value) == (f"the outputs bundle holds a tar header record (a long name or pax attributes) of "
                                    f"{512 << 20} bytes, over the {MAX_HEADER_RECORD_BYTES} allowed: nothing more was "
                                    "unpacked")

    assert peak_memory(refused) < 4 << 20
    assert list(dest.iterdir()) == []


def test_a_bundle_whose_headers_pass_the_cap_is_refused_as_it_decompresses(tmp_path):
    # 40 KiB of pax attributes per member: under the header record cap, over what headers may take
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"rank{i}.log")
            info.size, info.pax_headers = 3, {"comment": "x" * (40 << 10)}
            tar.addfile(info, io.BytesIO(b"ok\n"))
    dest = tmp_path / "run"
    dest.mkdir()
    limit = 1000 + 3 * HEADER_BYTES_PER_MEMBER + tarfile.RECORDSIZE
    with pytest.raises(BundleError, match=f"the outputs bundle decompresses past {limit} bytes .* nothing more was "
                                          "unpacked"):
        unpack(buffer.getvalue(), dest, max_total=1000, max_members=3)
    assert unpack(buffer.getvalue(), dest) == ["rank0.log", "rank1.log", "rank2.log"]  # within the default caps


def test_a_sparse_file_or_a_chain_of_header_records_is_refused_by_a_bundle_error(tmp_path):
    dest = tmp_path / "run"
    dest.mkdir()
    # GNU sparse 1.0: its map is the member's data, read whole into memory by tarfile ("1\n" is
    # 4 bytes of list for 2 of input)
    info = tarfile.TarInfo("gpu-rank0.csv")
    info.size = 64 << 20
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "10"}
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = deflate.compress(info.tobuf(format=tarfile.PAX_FORMAT) + b"100000000\n")
    data += b"".join(deflate.compress(b"1\n" * (1 << 19)) for _ in range(64)) + deflate.flush()

    def refused():
        with pytest.raises(BundleError, match=r"the outputs bundle holds a sparse file \('gpu-rank0.csv'\): nothing "
                                              "more was unpacked"):
            unpack(data, dest)

    assert peak_memory(refused) < 4 << 20
    gnu_sparse = tarfile.TarInfo("old.csv")
    gnu_sparse.type = tarfile.GNUTYPE_SPARSE
    with pytest.raises(BundleError, match=r"holds a sparse file \('old.csv'\)"):
        unpack(gzip_of(gnu_sparse.tobuf(format=tarfile.GNU_FORMAT), bytes(1024)), dest)
    # tarfile follows a chain of header records by recursion
    chain = gzip_of(*[header_record(tarfile.GNUTYPE_LONGNAME, 512) + b"a".ljust(512, b"\0")] * 2000, a_member())
    with pytest.raises(BundleError, match="the outputs bundle cannot be unpacked: maximum recursion depth"):
        unpack(chain, dest)
    assert list(dest.iterdir()) == []


def test_the_outputs_block_is_read_in_bounded_memory_and_the_last_one_wins():
    data = tar_gz([("rank0.log", b"ok\n")])
    encoded = base64.b64encode(data).decode()
    block = [BEGIN, *(encoded[i:i + 76] for i in range(0, len(encoded), 76)),
             f"{END}{hashlib.sha256(data).hexdigest()} skipped=- ==="]
    forged = [BEGIN, "QUFB", f"{END}{hashlib.sha256(b'AAA').hexdigest()} skipped=- ==="]
    kept, found, _ = read_log(["a", *forged, "b", *block])
    assert kept == ["a", "b"] and found == data
    reader = OutputsBlock(max_chars=100)
    assert [reader.feed(line) for line in [BEGIN, "A" * 60, "A" * 60, "x"]] == [False, False, False, False]
    reader.feed(block[-1])
    with pytest.raises(BundleError, match="over 100 characters"):
        reader.result()
    assert reader._body == []  # what came past the limit was never kept


def test_log_lines_come_in_bounded_pieces():
    endless = (b"z" * 1000 for _ in range(100))  # 100 kB without a newline
    pieces = list(lines_of(endless, max_line=4096))
    assert all(len(p) <= 4096 for p in pieces) and b"".join(pieces) == b"z" * 100_000
    assert list(lines_of([b"a\nb", b"c\n\nd" + b"e" * 10], max_line=4)) == [b"a", b"bc", b"", b"deee", b"eeee", b"eee"]


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
    with pytest.raises(BundleError, match="'../escape.txt' leaves the run folder; 'meta.json' would overwrite"):
        unpack(buffer.getvalue(), dest, keep={"meta.json"})
    assert (dest / "rank0.log").is_file()
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
    assert by_part.loc["container", "outcome"] == "can't tell"
    assert by_part.loc["network", "outcome"] == "slower"
    assert by_part.loc["network", "ratio"] == pytest.approx(90.2 / 99.9, rel=1e-3)
    assert kubernetes_gap(runs_frame({("v", "ssh"): ssh, ("v", "kubernetes"): pod_net})).empty  # no twin ran


def test_the_pod_network_is_what_the_nodes_annotations_say_and_what_the_pods_read():
    """A node's annotations: the stand-in's own line, else flannel's backend; the pods' readings of
    their own network (untrusted: a malformed one is passed over, names cut short) in one line per stack."""
    said = "vxlan overlay between 2 nodes: each pod a network namespace ..."
    flannel = "flannel.alpha.coreos.com/backend-type"
    assert pod_network_of({"standin.mxbench/pod-network": said, flannel: "x"}, 2) == said
    assert pod_network_of({flannel: "vxlan"}, 3) == \
        "vxlan overlay between 3 nodes: flannel's vxlan backend (the nodes' annotations)"
    assert pod_network_of({}, 2) is None
    veth = [{"name": "eth0", "driver": "veth", "mtu": 1450}]
    node = [{"name": "cni0", "driver": "bridge", "mtu": 1450}, {"name": "flannel.1", "driver": "vxlan", "mtu": 1450}]
    readings = [{"netns": "net:[1]", "interfaces": veth}, {"netns": "net:[2]", "interfaces": veth},
                {"netns": "net:[3]", "interfaces": node}, {"netns": 7, "interfaces": veth}, "junk",
                {"netns": "net:[4]", "interfaces": [{"name": None}]},
                {"netns": "net:[5]", "interfaces": [{"name": "x" * 99, "driver": "d\n" * 50, "mtu": 1}]}]
    line = pod_network_read(readings, "net:[9]")
    assert line.startswith("pod network: 2 network namespace(s), each with eth0 (veth, MTU 1450); host network: "
                           "1 network namespace(s), each with cni0 (bridge, MTU 1450), flannel.1 (vxlan, MTU 1450); "
                           f"pod network: 1 network namespace(s), each with {'x' * 15} (")
    assert len(line) < 400 and "\n" not in line
    assert pod_network_read([{"netns": "net:[9]", "interfaces": []}], "net:[9]") == \
        "none: the machine's own stack, the Airflow task's: 1 network namespace(s), each with lo only"
    assert pod_network_read([], "net:[9]") is None

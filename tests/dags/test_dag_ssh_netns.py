"""The ssh leg through dag.test() over hosts with a network between them: two sshd, each in a
network namespace of its own, joined by a link shaped to 1 Gbit/s (standins.netns). The two-host
dist_sync job's pushes and pulls cross that link, and the report's conditions say which network
the leg crossed. Nothing of the network is left once the fleet stops. The hosts' second link (4
Mbit/s) carries the cpu-link preset's twin, and the scaling model of that one DAG run learns the
network term from the two rates.
"""
import json
import subprocess

import pandas as pd
import pytest

from conftest import run_dag, train_python
from mxbench.report import scaling_tables
from mxbench.run_folder import read_json
from standins import netns

pytestmark = pytest.mark.slow  # dag.test() runs over real sshd in namespaces

CONF = {"preset": "cpu-demo", "only_variants": ["cpu2h-bs64"], "launchers": ["ssh"], "repeats": 1, "epochs": 1,
        "synthetic_images": 1000}


def _port_bytes(network: netns.Network, i: int) -> int:
    """What host i sent into the bridge: its switch port's received bytes."""
    shown = subprocess.run(["ip", "-n", network.switch, "-j", "-s", "link", "show", f"host{i + 1}"],
                           capture_output=True, text=True, check=True).stdout
    return json.loads(shown)[0]["stats64"]["rx"]["bytes"]


@pytest.fixture(scope="module")
def netns_dag_run(airflow_db, netns_ssh_hosts):
    fleet, network = netns_ssh_hosts
    before = [_port_bytes(network, i) for i in range(2)]
    run, dag_dir = run_dag(CONF, fleet.airflow_env(mxbench_python=train_python()))
    return run, dag_dir, [_port_bytes(network, i) - b for i, b in enumerate(before)]


def test_two_hosts_train_dist_sync_across_the_shaped_link(netns_dag_run, netns_ssh_hosts):
    run, dag_dir, sent = netns_dag_run
    fleet, _ = netns_ssh_hosts
    assert run.state == "success"
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert runs["status"].to_dict() == {"cpu2h-bs64__ssh__r1": "ok"}
    assert runs["samples_per_sec"].iloc[0] > 0
    assert runs["pressure_source"].iloc[0] == "the role's own cgroup"  # a namespace host keeps the cgroup mount
    plan = json.loads((dag_dir / "cpu2h-bs64__ssh__r1" / "plan.json").read_text())
    first, second = (h.address for h in fleet.hosts)
    assert {p["name"]: p["host"] for p in plan} == {"scheduler": first, "server-0": first, "server-1": second,
                                                  "worker-0": first, "worker-1": second}
    assert {p["env"]["DMLC_PS_ROOT_URI"] for p in plan} == {first}
    # worker-1 pushes its gradients to server-0 on the other host: megabytes through each port
    assert min(sent) > 1_000_000, sent


def test_report_says_which_network_the_ssh_leg_crossed(netns_dag_run):
    _, dag_dir, _ = netns_dag_run
    md = (dag_dir / "report" / "report.md").read_text()
    assert ("SSH TARGET: the hosts mxbench_ssh_1, mxbench_ssh_2 are the machine Airflow runs on, each in a "
            "network namespace of its own") in md
    assert "SSH TARGET: the network of mxbench_ssh_1, mxbench_ssh_2: network namespaces joined by a bridge, " \
           "each host's link shaped to 1gbit each way" in md
    assert "no network was crossed" not in md


def test_the_run_records_its_link_rate_and_the_bytes_its_hosts_read(netns_dag_run):
    """What the scaling model learns the network term from (``scaling_model.network_from_links``):
    the link rate the connections state, and the bytes each host read itself while training, which
    lie within what the switch saw that host send over the whole run (set-up and fetch included)."""
    _, dag_dir, sent = netns_dag_run
    run = pd.read_csv(dag_dir / "tables" / "runs.csv").iloc[0]
    assert run["link_bits"] == 1e9
    batches = 1000 // 64 // 2  # each worker's, of 1000 synthetic images in one epoch
    read = run["link_bytes_per_step"] * batches
    assert 0.3 * max(sent) < read <= 1.02 * max(sent), (read, sent)


LINK_CONF = {"preset": "cpu-link", "launchers": ["ssh"], "repeats": 2, "epochs": 1, "synthetic_images": 1000}


def test_one_dag_run_over_both_links_identifies_the_network_term(airflow_db, netns_ssh_hosts):
    """The cpu-link preset: cpu2h-bs64 over the hosts' default link (1 Gbit/s) and its twin over
    their slow one (4 Mbit/s, each connection's mxbench_links), in one DAG run; its roles bind the
    slow link's addresses, each run records its own rate, and the scaling model of this run alone
    learns the network term from them, positive with an interval that excludes 0 (two rounds: one
    run a rate leaves no spread to judge it by)."""
    fleet, network = netns_ssh_hosts
    run, dag_dir = run_dag(LINK_CONF, fleet.airflow_env(mxbench_python=train_python()))
    assert run.state == "success"
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("variant")
    assert (runs["status"] == "ok").all(), runs["status"]
    assert set(runs.loc["cpu2h-bs64", "link_bits"]) == {1e9} and set(runs.loc["cpu2h-bs64-slow", "link_bits"]) == {4e6}
    plan = json.loads((dag_dir / "cpu2h-bs64-slow__ssh__r1" / "plan.json").read_text())
    assert {p["host"] for p in plan} == set(network.link_addresses("slow"))
    assert runs.loc["cpu2h-bs64-slow", "samples_per_sec"].max() < runs.loc["cpu2h-bs64", "samples_per_sec"].min()

    [found] = scaling_tables.models(pd.read_csv(dag_dir / "tables" / "runs.csv"), read_json(dag_dir / "request.json"))
    assert found.notes[0].startswith("network: learned from runs at link rates 4 Mbit/s, 1 Gbit/s")
    assert found.notes[1].startswith("network: identified from the same size at two rates: "), found.notes

"""The scaling model learns the network term from runs of one multi-host size at two link rates:
the rate each run recorded (the ssh hosts' ``mxbench_link_rate``, in meta.json) and the bytes its
hosts read themselves (``net_sent_bytes`` in the workers' run_end events), both through the
parse path a DAG run takes; with one rate it says it still assumes an allowance, and why."""
import numpy as np
import pandas as pd
import pytest

from mxbench import cli
from mxbench.matrix.variants import Target, expand_runs
from mxbench.report import scaling_tables
from mxbench.run_folder import DagRunFolder, read_json, write_json
from mxbench.stages import pipeline
from mxbench_train.events import format_event

PARAMS = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64", "cpu2w-bs64", "cpu2h-bs64"], "launchers": ["ssh"],
          "repeats": 3}
BATCH = 64
BATCHES = 15  # each worker's, per run
COMPUTE_S, DEVICE_LINK_S = 0.25, 0.10  # planted: seconds a step, and per unit of (m-1)/m on one host
HOST_BYTES = 250e3  # planted: bytes each host of cpu2h sends a step (half of each worker's gradient)
NETWORK_SHARE = 1.0  # planted: the link's time adds to the step whole


def step_s(variant: dict, link_bits, share: float, one_host_compute: float = COMPUTE_S) -> float:
    if variant["hosts"] > 1:
        return COMPUTE_S + share * 8 * HOST_BYTES / link_bits
    m = variant["workers"]
    return one_host_compute + DEVICE_LINK_S * (m - 1) / m


def worker_log(rank: int, workers: int, speed: float, sent_bytes) -> str:
    """One worker's log as the trainer writes it: run_start, Speedometer lines, epochs, run_end with
    its host's reading."""
    lines = [format_event("run_start", rank=rank, num_workers=workers, batch_size=BATCH)]
    for epoch, cost in ((0, 9.0), (1, 6.0)):
        lines += [f"INFO:root:Epoch[{epoch}] Batch [{b}]\tSpeed: {speed:.2f} samples/sec\taccuracy=0.1"
                  for b in (5, 10)]
        lines += [f"INFO:root:Epoch[{epoch}] Time cost={cost:.3f}"]
    host = {"host": "box", "wall_s": 10.0, "foreign_cpu_s": 0.0, "steal": 0.0}
    if sent_bytes is not None:
        host["net_sent_bytes"] = sent_bytes
    lines.append(format_event("run_end", rank=rank, status="ok", images_seen=BATCHES * BATCH, host=host))
    return "\n".join(lines) + "\n"


def dag_run(folder, rate_bits, seed, variants=PARAMS["only_variants"], read_bytes=True, share=NETWORK_SHARE,
            noise=0.01, one_host_compute=COMPUTE_S):
    """A DAG run folder of ssh runs whose hosts are joined at ``rate_bits``, parsed by parse_all."""
    params = {**PARAMS, "only_variants": list(variants)}
    runs = expand_runs(params, {"ssh": Target("ssh", 2, 0)})
    folder.mkdir()
    write_json(folder / "request.json", {"runs": runs, "params": params})
    write_json(folder / "data.json", {"records": {"train": 1000}})
    rng = np.random.default_rng(seed)
    for t, run in enumerate(runs):
        v = run["variant"]
        linked = v["hosts"] > 1
        step = step_s(v, rate_bits, share, one_host_compute)
        speed = v["workers"] * BATCH / step * float(np.exp(rng.normal(0, noise)))
        run_dir = folder / run["key"]
        run_dir.mkdir()
        for rank in range(v["workers"]):
            sent = HOST_BYTES * BATCHES if linked else 1000  # a 1-host run sends next to nothing
            (run_dir / f"rank{rank}.log").write_text(worker_log(rank, v["workers"], speed / v["workers"],
                                                                sent if read_bytes else None))
        meta = {"key": run["key"], "variant": v, "launcher": "ssh", "repeat": run["repeat"], "status": "ok",
                "started_at": t, "ended_at": t + 1, "duration_s": 1.0}
        if linked:  # as run_stage records the launcher's link_bits: runs across hosts only
            meta["link_bits"] = rate_bits
        write_json(run_dir / "meta.json", meta)
    pipeline.parse_all(DagRunFolder(folder))
    return folder


def pooled(*folders):
    runs = pd.concat([pd.read_csv(f / "tables" / "runs.csv") for f in folders], ignore_index=True)
    variants = {}
    for f in folders:
        variants.update(scaling_tables.variants_of(read_json(f / "request.json")))
    return runs, variants


def test_the_runs_record_their_link_rate_and_the_bytes_their_hosts_sent(tmp_path):
    runs = pd.read_csv(dag_run(tmp_path / "fast", 1e9, seed=0) / "tables" / "runs.csv").set_index("variant")
    linked = runs.loc["cpu2h-bs64"]
    assert (linked["link_bits"] == 1e9).all()
    assert np.allclose(linked["link_bytes_per_step"], HOST_BYTES)
    assert runs.loc["cpu1-bs64", "link_bits"].isna().all()


def test_two_link_rates_identify_the_network_term(tmp_path, capsys):
    fast, slow = dag_run(tmp_path / "fast", 1e9, seed=1), dag_run(tmp_path / "slow", 10e6, seed=2,
                                                                  variants=["cpu2h-bs64"])
    [found] = scaling_tables.fitted(*pooled(fast, slow))
    network = scaling_tables.scaling_model.TERMS.index("network")
    assert found.model.seen[network]
    assert 0.8 < found.model.coef[network] < 1.2  # the planted share of the link's time
    assert abs(found.model.coef[0] - COMPUTE_S) < 0.03  # at the fast rate the rest is compute
    assert "learned from runs at link rates 10 Mbit/s, 1 Gbit/s" in found.notes[0]
    assert found.notes[1].startswith("network: identified from the same size at two rates: ")
    share, low, high, df = scaling_tables.scaling_model.link_share(found.model.points)
    assert 0 < low < NETWORK_SHARE < high and df == 4  # 3 runs a rate, an intercept and the share
    assert not any("network" in a for c in found.curve for a in c.assumed)  # no allowance anywhere

    assert cli.main(["scaling", str(fast), str(slow)]) == 0
    out = capsys.readouterr().out
    assert "from the link rates (per second of link time)" in out
    assert "2 CPU workers on 2 machines at 10 Mbit/s" in out and "these DAG runs' cost" in out


def test_the_network_share_comes_from_the_two_rates_whatever_the_one_host_sizes_cost(tmp_path):
    """The 1-host sizes compute in 0.1 s, the 2-host size in 0.25 s (this machine's workers share its
    cores): no single compute term fits both, but the share of the link's time is the one the two
    rates give (pinned), not one the misfit pulls."""
    fast = dag_run(tmp_path / "fast", 1e9, seed=12, one_host_compute=0.1)
    slow = dag_run(tmp_path / "slow", 10e6, seed=13, variants=["cpu2h-bs64"], one_host_compute=0.1)
    [found] = scaling_tables.fitted(*pooled(fast, slow))
    network = scaling_tables.scaling_model.TERMS.index("network")
    share, low, high, _ = scaling_tables.scaling_model.link_share(found.model.points)
    assert found.model.coef[network] == share and 0.95 < share < 1.05
    assert (found.model.coef_low[network], found.model.coef_high[network]) == (low, high)


@pytest.mark.parametrize("share, noise", [(0.0, 0.01), (0.02, 0.15)])
def test_a_link_that_does_not_show_in_the_step_is_not_identified(tmp_path, share, noise):
    """A link whose cost is nil (share 0), or lost in the runs' noise (2% of its time, speeds spread
    15%): the term's interval holds 0, so the model says it is not identified, and why."""
    fast = dag_run(tmp_path / "fast", 1e9, seed=6, share=share, noise=noise)
    slow = dag_run(tmp_path / "slow", 10e6, seed=7, variants=["cpu2h-bs64"], share=share, noise=noise)
    [found] = scaling_tables.fitted(*pooled(fast, slow))
    network = scaling_tables.scaling_model.TERMS.index("network")
    assert not found.model.seen[network]
    assert found.notes[1].startswith("network: not identified (") and "includes 0" in found.notes[1]
    states = scaling_tables.terms_table([found]).set_index("term")["state"]
    assert states["network"].startswith("not identified (see the network line")


def test_one_run_per_rate_is_too_few_to_identify_the_network(tmp_path):
    fast = dag_run(tmp_path / "fast", 1e9, seed=10)
    slow = dag_run(tmp_path / "slow", 10e6, seed=11, variants=["cpu2h-bs64"])
    runs, variants = pooled(fast, slow)
    one_each = runs[(runs["variant"] != "cpu2h-bs64") | (runs["repeat"] == 1)]
    [found] = scaling_tables.fitted(one_each, variants)
    assert found.notes[1].startswith("network: not identified (one run per rate leaves no spread to judge")


def test_one_link_rate_keeps_the_allowance_and_says_why(tmp_path):
    [found] = scaling_tables.fitted(*pooled(dag_run(tmp_path / "fast", 1e9, seed=3)))
    network = scaling_tables.scaling_model.TERMS.index("network")
    assert not found.model.seen[network]
    assert found.notes[0].startswith("network: not learned from the runs (no size of several hosts was measured "
                                     "at two link rates (measured: 1 Gbit/s))")
    assert any(a.startswith("network: not identified") for c in found.curve if c.projected for a in c.assumed)


def test_without_the_hosts_reading_of_bytes_the_rates_alone_do_not_count(tmp_path):
    fast = dag_run(tmp_path / "fast", 1e9, seed=4, read_bytes=False)
    slow = dag_run(tmp_path / "slow", 10e6, seed=5, variants=["cpu2h-bs64"], read_bytes=False)
    [found] = scaling_tables.fitted(*pooled(fast, slow))
    assert "read no bytes sent" in found.notes[0]


def test_an_ssh_connection_states_its_link_rate_in_tcs_words_or_bits():
    from mxbench.launchers.ssh.commands import host_settings
    from mxbench_train.errors import MxbenchError

    assert host_settings("h", "198.18.0.2", {"mxbench_link_rate": "10mbit"}).link_bits == 10e6
    assert host_settings("h", "198.18.0.2", {"mxbench_link_rate": "2.5gbit"}).link_bits == 2.5e9
    assert host_settings("h", "198.18.0.2", {"mxbench_link_rate": 1000000}).link_bits == 1e6
    assert host_settings("h", "198.18.0.2", {}).link_bits is None
    with pytest.raises(MxbenchError, match="mxbench_link_rate 'fast' is not a rate"):
        host_settings("h", "198.18.0.2", {"mxbench_link_rate": "fast"})


def test_an_ssh_connection_lists_its_other_links_with_address_and_rate():
    from mxbench.launchers.ssh.commands import host_settings
    from mxbench_train.errors import MxbenchError

    extra = {"mxbench_link_rate": "1gbit", "mxbench_links": {"slow": {"address": "198.18.9.2", "rate": "4mbit"}}}
    host = host_settings("h", "198.18.8.2", extra)
    assert host.links == {"slow": ("198.18.9.2", 4e6)}
    slow = host.over("slow")
    assert (slow.address, slow.link_bits, slow.conn_id) == ("198.18.9.2", 4e6, "h")
    assert host.over("") is host
    as_text = host_settings("h", "198.18.8.2", {"mxbench_links": '{"slow": {"address": "198.18.9.2", "rate": 4e6}}'})
    assert as_text.links == {"slow": ("198.18.9.2", 4e6)}
    for links, says in (({"slow": {"address": "box", "rate": "4mbit"}}, "needs the IP address"),
                        ({"slow": {"address": "198.18.9.2"}}, "needs its rate"),
                        ({"slow; rm": {"address": "198.18.9.2", "rate": "4mbit"}}, "must be an object of link names"),
                        ({"slow": {"address": "198.18.9.2", "rate": "fast"}}, "is not a rate")):
        with pytest.raises(MxbenchError, match=says):
            host_settings("h", "198.18.8.2", {"mxbench_links": links})
    # two hosts that share a link's address would have one host's roles start on the other
    from mxbench.launchers.ssh.ssh_launcher import SshLauncher

    other = host_settings("h2", "198.18.8.3", {"mxbench_links": {"slow": {"address": "198.18.9.2", "rate": "4mbit"}}})
    with pytest.raises(MxbenchError, match="'h' and 'h2' are the same address 198.18.9.2"):
        SshLauncher([host, other])


def test_the_cpu_link_preset_runs_its_slow_twin_only_where_every_ssh_host_has_the_link():
    from mxbench.matrix.variants import VariantError

    params = {"preset": "cpu-link", "launchers": ["ssh", "local"], "repeats": 1}
    with_link = {"ssh": Target("ssh", 2, 0, links=("slow",)), "local": Target("local", 1, 0, one_machine=True)}
    runs = expand_runs(params, with_link)
    assert sorted(r["key"] for r in runs) == ["cpu1-bs64__local__r1", "cpu1-bs64__ssh__r1", "cpu2h-bs64-slow__ssh__r1",
                                              "cpu2h-bs64__local__r1", "cpu2h-bs64__ssh__r1"]
    assert next(r for r in runs if r["variant"]["id"] == "cpu2h-bs64-slow")["variant"]["link"] == "slow"
    with pytest.raises(VariantError, match="runs over the hosts' link 'slow', which not every ssh host has"):
        expand_runs(params, {**with_link, "ssh": Target("ssh", 2, 0)})


def test_the_store_keeps_each_runs_link_and_its_scaling_model_learns_the_network_from_it(tmp_path, capsys):
    """Revision 0011: the repeats keep link_bits and link_bytes_per_step, the history reads them, and
    ``mxbench scaling --store`` over the two stored DAG runs learns the network term from the rates."""
    from mxbench import store

    url = f"sqlite:///{tmp_path / 'results.db'}"
    fast, slow = dag_run(tmp_path / "fast", 1e9, seed=8), dag_run(tmp_path / "slow", 10e6, seed=9,
                                                                  variants=["cpu2h-bs64"])
    for folder in (fast, slow):
        store.record_dag_run(url, DagRunFolder(folder), dag_id="mxbench_benchmark", run_id=folder.name,
                             trigger="manual")
    history = store.read_history(url, variant="cpu2h-bs64").set_index("run_id")
    assert set(history.loc["slow", "link_bits"]) == {10e6} and set(history.loc["fast", "link_bits"]) == {1e9}
    assert np.allclose(history["link_bytes_per_step"].astype(float), HOST_BYTES)
    assert cli.main(["history", "cpu2h-bs64", "--url", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "link" and sorted(line.split()[-2] for line in lines[1:]) == ["1"] * 3 + ["10"] * 3

    assert cli.main(["scaling", "--store", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "network: learned from runs at link rates 10 Mbit/s, 1 Gbit/s" in out
    assert "network: identified from the same size at two rates: " in out

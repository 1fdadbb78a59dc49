"""The quiet check before a run: the wait loop with an injected reader and clock (quiet after N looks;
never quiet: the bound is spent and the run goes on), how a reading is judged, what is not checked,
and that the run's meta.json and the runs table keep what it saw."""
import pytest

from mxbench.hosts import quiet_gate
from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
from mxbench.results import contention
from mxbench.run_folder import DagRunFolder
from mxbench_train.errors import MxbenchError

QUIET = {"foreign_cores": 0.05, "steal": 0.0, "cpu_pressure": 0.3, "foreign_top": []}
BUSY = {"foreign_cores": 1.2, "steal": 0.0, "cpu_pressure": 0.9,
        "foreign_top": [{"pid": 4242, "name": "stress", "cores": 1.1}]}


class Clock:
    """A clock that the probe moves by each window it samples."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def scripted(clock, *looks):
    """A probe giving ``looks`` in turn (the last one again after), each taking its window."""
    seen = []

    def probe(seconds):
        clock.now += seconds
        seen.append(seconds)
        return looks[min(len(seen), len(looks)) - 1]
    probe.seen = seen
    return probe


def test_quiet_after_three_looks_waits_and_records_it():
    clock = Clock()
    probe = scripted(clock, {"h1": BUSY, "h2": QUIET}, {"h1": BUSY, "h2": QUIET}, {"h1": QUIET, "h2": QUIET})
    record = quiet_gate.wait_quiet(probe, 60, clock=clock)
    assert probe.seen == [2.0, 2.0, 2.0]
    assert record["quiet"] is True and record["samples"] == 3 and record["waited_s"] == 6.0
    assert record["readings"] == {"h1": QUIET, "h2": QUIET} and record["noisy"] == {}
    assert record["why"] == "quiet after 3 looks of 2 s"
    assert record["thresholds"]["h1"] == contention.DEFAULTS.as_dict()  # no table: the defaults


def test_each_host_is_judged_with_its_own_kind_of_machines_thresholds():
    """The probe reports each host's machine facts; the DAG run's table (from A/A calibrations)
    holds thresholds by fingerprint: a node whose daemons always use 0.3 cores is quiet at 0.3."""
    from mxbench.results.machines import fingerprint

    busy_node = {"cpu_model": "Xeon", "cpu_count": 96, "gpu": {"available": False}}
    dedicated = {"cpu_model": "EPYC", "cpu_count": 2, "gpu": {"available": False}}
    key = contention.table_key
    table = {key(fingerprint(busy_node)[0], "ssh"): {"foreign_cores": 0.6, "steal": 0.05, "source": "12 A/A runs"},
             key(fingerprint(dedicated)[0], "ssh"): {"foreign_cores": 0.05, "steal": 0.01, "source": "9 A/A runs"},
             key(fingerprint(busy_node)[0], "local"): {"foreign_cores": 0.1, "steal": 0.05, "source": "local's"}}
    looks = {"node": {**QUIET, "foreign_cores": 0.3, "machine": busy_node},
             "box": {**QUIET, "foreign_cores": 0.08, "machine": dedicated},
             "unknown": {**QUIET, "foreign_cores": 0.2, "machine": {"cpu_model": "other"}}}
    record = quiet_gate.wait_quiet(scripted(Clock(), looks), 4, table, launcher="ssh")
    assert record["quiet"] is False and list(record["noisy"]) == ["box"]  # 0.08 >= its 0.05; 0.3 < 0.6
    assert record["thresholds"]["node"]["foreign_cores"] == 0.6 and record["thresholds"]["box"]["steal"] == 0.01
    assert record["thresholds"]["unknown"] == contention.DEFAULTS.as_dict()  # 0.2 < the default 0.25


def test_never_quiet_spends_the_bound_records_why_and_the_run_goes_on():
    clock = Clock()
    probe = scripted(clock, {"h1": BUSY, "h2": QUIET})
    record = quiet_gate.wait_quiet(probe, 9, clock=clock)
    assert len(probe.seen) == 4  # 8 s: a fifth look would pass the bound of 9
    assert record["quiet"] is False and record["waited_s"] == 8.0 and record["bound_s"] == 9
    assert record["noisy"] == {"h1": ["other processes used 1.20 cores (stress pid 4242 1.10)"]}
    assert record["why"] == ("not quiet after 8 s (the bound is 9 s), the run went on: "
                             "h1: other processes used 1.20 cores (stress pid 4242 1.10)")


def test_a_bound_below_one_look_looks_once_for_that_long():
    clock = Clock()
    probe = scripted(clock, {"h": BUSY})
    record = quiet_gate.wait_quiet(probe, 1, clock=clock)
    assert probe.seen == [1] and record["quiet"] is False and record["samples"] == 1


def test_steal_counts_pressure_does_not_and_unread_signals_are_no_reason():
    assert quiet_gate.noisy({**QUIET, "steal": 0.08}) == ["steal 8%"]
    assert quiet_gate.noisy({**QUIET, "cpu_pressure": 0.95}) == []
    assert quiet_gate.noisy({"unreadable": ["steal (no /proc/stat)"], "foreign_cores": 0.0}) == []
    assert quiet_gate.noisy({**QUIET, "foreign_cores": 0.3}, contention.Thresholds(foreign_cores=0.5)) == []


def test_off_not_lookable_and_failing_probes_are_recorded_never_raised():
    assert quiet_gate.wait_quiet(lambda s: pytest.fail("looked"), 0)["why"] == "not checked: quiet_wait_s is 0 (off)"

    class Blind:
        name = "blind"
    record = quiet_gate.check(Blind(), None, 60)
    assert record["quiet"] is None and record["why"] == "not checked: the blind launcher cannot look at its hosts"

    def broken(seconds):
        raise OSError("connection reset")
    record = quiet_gate.wait_quiet(broken, 60, clock=Clock())
    assert record["quiet"] is None and record["why"] == "not checked: OSError: connection reset"


def test_kubernetes_nodes_are_not_checked_and_it_says_why():
    launcher = KubernetesLauncher.__new__(KubernetesLauncher)  # no cluster needed to refuse
    with pytest.raises(MxbenchError):
        launcher.quiet_probe(None, 2)
    record = quiet_gate.check(launcher, None, 60)
    assert record["quiet"] is None and record["why"] == "not checked: a pod sees only its own /proc, not its node's"


def test_the_runs_table_columns():
    assert quiet_gate.columns(None) == {"quiet_wait_s": None, "quiet": None}
    assert quiet_gate.columns({"waited_s": 6.0, "quiet": True, "why": "..."}) == {"quiet_wait_s": 6.0, "quiet": True}


def test_a_run_waits_before_its_launcher_starts_and_meta_and_runs_table_keep_it(tmp_path):
    import json
    import time
    from types import SimpleNamespace

    from mxbench.launchers import Launched
    from mxbench.matrix.variants import Target, expand_runs
    from mxbench.stages import pipeline, run_stage

    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                         {"local": Target("local", 1, 0)})
    events = []

    class Watched:
        name = "local"

        def reap(self, run_folder):
            return []

        def quiet_probe(self, variant, seconds):
            events.append(("look", seconds, time.time()))
            return {"here": BUSY if len(events) < 2 else QUIET}

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            events.append(("execute", None, time.time()))
            return Launched([], [SimpleNamespace(start_s=0.0, wall_s=1.0, warning=None)], {"python": "py"})

    result = run_stage.run_one(run, DagRunFolder(tmp_path),
                               {"dir": str(tmp_path / "data"), "records": {"train": 10_000}}, 60,
                               lambda name: Watched(), quiet_wait_s=30)
    assert result["status"] == "ok" and [e[0] for e in events] == ["look", "look", "execute"]
    meta = json.loads((tmp_path / run["key"] / "meta.json").read_text())
    assert meta["quiet"]["quiet"] is True and meta["quiet"]["samples"] == 2 and meta["quiet"]["bound_s"] == 30
    assert meta["quiet"]["readings"] == {"here": QUIET}
    assert events[1][2] <= meta["started_at"] <= events[2][2]  # the run began after its wait
    row, _, _ = pipeline.parse_run(run, DagRunFolder(tmp_path))
    assert row["quiet"] is True and row["quiet_wait_s"] == meta["quiet"]["waited_s"]


def test_the_run_task_judges_its_hosts_with_the_thresholds_its_dag_run_expanded_with(tmp_path):
    """expand writes the table to request.json; the run's quiet check reads it there: 0.1 of a core
    is busy for a box whose A/A runs saw next to nothing, quiet under the defaults."""
    import json
    from types import SimpleNamespace

    from mxbench.launchers import Launched
    from mxbench.matrix.variants import Target
    from mxbench.results.machines import fingerprint
    from mxbench.stages import pipeline, run_stage

    box = {"cpu_model": "EPYC", "cpu_count": 2, "gpu": {"available": False}}
    strict = contention.Thresholds(0.06, 0.01, "from 9 A/A runs on this hardware (1 calibration)")

    class Probed:
        name = "local"

        def reap(self, run_folder):
            return []

        def quiet_probe(self, variant, seconds):
            return {"here": {**QUIET, "foreign_cores": 0.1, "machine": box}}

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            return Launched([], [SimpleNamespace(start_s=0.0, wall_s=1.0, warning=None)], {"python": "py"})

    strict_local = {contention.table_key(fingerprint(box)[0], "local"): strict.as_dict()}
    strict_ssh = {contention.table_key(fingerprint(box)[0], "ssh"): strict.as_dict()}
    for name, table, busy in (("strict", strict_local, True), ("defaults", {}, False), ("ssh's", strict_ssh, False)):
        dag_dir = tmp_path / name
        (run,) = pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                                 DagRunFolder(dag_dir),
                                 {"local": Target("local", 1, 0)}, contention=table)
        assert json.loads((dag_dir / "request.json").read_text())["contention_thresholds"] == table
        run_stage.run_one(run, DagRunFolder(dag_dir), {"dir": str(tmp_path / "data"), "records": {"train": 10_000}}, 60,
                          lambda _: Probed(), quiet_wait_s=0.5)
        record = json.loads((dag_dir / run["key"] / "meta.json").read_text())["quiet"]
        assert record["quiet"] is not busy
        assert record["thresholds"]["here"] == (strict if busy else contention.DEFAULTS).as_dict(), name

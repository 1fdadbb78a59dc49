"""What a regression check's baseline is made of (issue 32, item 1): only runs that measured the same
setup (``variants.measured_setup``, the store's ``setup_key``), and only of the DAGs the deployer lets
feed it (``MXBENCH_BASELINE_DAGS``, default the regression DAG's own). A trigger user of
``mxbench_benchmark`` who overrides ``num_layers`` keeps the variant id, and must not move the baseline."""
from datetime import timedelta

import pytest

from mxbench import config, store
from mxbench.run_folder import DagRunFolder
from mxbench.stages import regression_check
from support.stored_runs import CPU_FP, SETUP, T0, make_dag_dir, ok_runs, setup_of, variant

REGRESSION, BENCHMARK = "mxbench_regression", "mxbench_benchmark"
NIGHTLY = (100.0, 101.0, 99.0, 100.5)  # samples/s of a regression DAG run's repeats
RESNET_110 = (10.0, 10.1, 9.9, 10.05)  # what a num_layers=110 override of the same variant id gives
DROPPED = tuple(s * 0.8 for s in NIGHTLY)  # a real 20% drop
DEEP = {**variant(), "num_layers": 110}  # the override: same id, another setup


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def record(url, tmp_path, day: int, dag_id: str, speeds, v=None) -> str:
    run_id = f"{dag_id}__day{day}"
    folder = make_dag_dir(tmp_path, run_id, ok_runs(v, speeds=speeds), started=T0 + timedelta(days=day))
    store.record_dag_run(url, DagRunFolder(folder), dag_id=dag_id, run_id=run_id, trigger="manual",
                         logical_date=T0 + timedelta(days=day))
    return run_id


def check(url, tmp_path, run_id):
    (finding,) = regression_check.check_regressions(DagRunFolder(tmp_path / run_id), url, REGRESSION, run_id,
                                                    {"local": CPU_FP},
                                                    baseline_runs=5, min_drop=0.05)
    return finding


def seed_the_attack(url, tmp_path, overridden=DEEP):
    """Five nights at about 100, then five benchmark runs of the same variant id at about 10 (a
    ResNet-110 override, chosen later logical dates), then a night with a real 20% drop."""
    for day in range(5):
        record(url, tmp_path, day, REGRESSION, NIGHTLY)
    for day in range(5, 10):
        record(url, tmp_path, day, BENCHMARK, RESNET_110, overridden)
    return record(url, tmp_path, 10, REGRESSION, DROPPED)


def test_an_overridden_benchmark_run_cannot_hide_a_real_drop(url, tmp_path):
    night = seed_the_attack(url, tmp_path)
    finding = check(url, tmp_path, night)
    # the old code pooled the benchmark's ResNet-110 runs: "improved, +700%"
    assert finding["status"] == "regression", finding["message"]
    assert abs(finding["change"] + 0.2) < 0.02
    assert set(finding["baseline_runs"].split()) == {f"{REGRESSION}__day{d}" for d in range(5)}


def test_another_setup_of_the_variant_id_never_pools_even_from_a_dag_allowed_to_feed(url, tmp_path, monkeypatch):
    monkeypatch.setenv(config.BASELINE_DAGS_ENV, f"{REGRESSION},{BENCHMARK}")
    night = seed_the_attack(url, tmp_path)
    assert check(url, tmp_path, night)["status"] == "regression"
    assert setup_of(DEEP) != SETUP
    found = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=(REGRESSION, night), runs=20, setup=SETUP)
    assert set(found["dag_id"]) == {REGRESSION} and min(found["samples_per_sec"]) >= 99.0
    deep = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=(REGRESSION, night), runs=20,
                          setup=setup_of(DEEP))
    assert set(deep["dag_id"]) == {BENCHMARK} and max(deep["samples_per_sec"]) <= 10.1
    # the data's kind is part of the setup too
    assert setup_of(params={"dataset": "https://data.example/cifar10.tar.gz"}) != SETUP


def test_a_benchmark_dags_runs_feed_no_baseline_unless_the_deployer_lists_it(url, tmp_path, monkeypatch):
    """Same setup, a faked level: a benchmark DAG run at 1000 samples/s (another build, or another
    machine's number under this fingerprint) would make every night a regression."""
    for day in range(5):
        record(url, tmp_path, day, REGRESSION, NIGHTLY)
    for day in range(5, 10):
        record(url, tmp_path, day, BENCHMARK, tuple(10 * s for s in NIGHTLY))
    night = record(url, tmp_path, 10, REGRESSION, NIGHTLY)
    monkeypatch.delenv(config.BASELINE_DAGS_ENV, raising=False)
    assert config.baseline_dags() == (REGRESSION,)
    assert check(url, tmp_path, night)["status"] == "ok"
    monkeypatch.setenv(config.BASELINE_DAGS_ENV, f" {REGRESSION}, {BENCHMARK} ,")
    assert config.baseline_dags() == (REGRESSION, BENCHMARK)
    assert check(url, tmp_path, night)["status"] == "regression"  # the deployer let it feed the baseline
    # a bisect's probes never feed one, whatever the setting says
    monkeypatch.setenv(config.BASELINE_DAGS_ENV, "mxbench_bisect")
    assert store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=(REGRESSION, night), setup=SETUP).empty


def test_each_repeat_records_what_it_measured(url, tmp_path):
    record(url, tmp_path, 0, REGRESSION, NIGHTLY)
    record(url, tmp_path, 1, BENCHMARK, RESNET_110, DEEP)
    keys = {(r["dag_id"], r["setup_key"]) for r in store.history(url, "cpu2-bs32").to_dict("records")}
    assert keys == {(REGRESSION, SETUP), (BENCHMARK, setup_of(DEEP))}

"""The results store's repeats shaped for the scaling views: every stored DAG run of a setup feeds
one fit, which recovers a planted step-time model within its intervals; two kinds of machine are
refused by name; efficiency by MXNet build against the same build's 1-device variant."""
import pandas as pd
import pytest

from mxbench import store
from mxbench.report import scaling_tables
from mxbench.results import stored
from support.stored_runs import (
    CPU_FP,
    OTHER_CPU_BOX,
    OTHER_FP,
    PLANTED_STEP,
    planted_speed,
    record_scaling_series,
)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def rows_of(url, **choices):
    return stored.sized(store.history(url, **choices), store.read_sizes(url))


def test_the_store_based_fit_takes_every_dag_run_and_recovers_the_planted_model(url, tmp_path):
    record_scaling_series(url, tmp_path, dag_runs=4)
    runs, variants = stored.fit_inputs(rows_of(url))
    assert runs.groupby(["dag_id", "run_id"]).ngroups == 4 and len(runs) == 4 * 3 * 2
    assert variants["cpu4-bs32"]["workers"] == 4 and variants["cpu4-bs32"]["kvstore"] == "dist_sync"
    found = scaling_tables.fitted(runs, variants)
    assert [m.key for m in found] == [("local", 8, 32)]
    model = found[0].model
    assert [len(p.speeds) for p in model.points] == [8, 8, 8]  # 4 DAG runs x 2 repeats per size
    for j, term in enumerate(("compute", "device link")):
        assert model.coef_low[j] <= PLANTED_STEP[term] <= model.coef_high[j], term
        assert model.coef[j] == pytest.approx(PLANTED_STEP[term], rel=0.05)


def test_two_kinds_of_machine_are_refused_by_name(url, tmp_path):
    record_scaling_series(url, tmp_path, dag_runs=3)
    record_scaling_series(url, tmp_path, dag_runs=1, environment=OTHER_CPU_BOX, first=3)
    with pytest.raises(stored.MixedMachines) as refused:
        stored.fit_inputs(rows_of(url))
    message = str(refused.value)
    assert "2 kinds of machine" in message and "--fingerprint" in message
    assert f"{CPU_FP} (3 DAG runs, 18 repeats)" in message and f"{OTHER_FP} (1 DAG run, 6 repeats)" in message
    runs, _ = stored.fit_inputs(rows_of(url, fingerprint=OTHER_FP))
    assert runs.groupby(["dag_id", "run_id"]).ngroups == 1


def test_a_dag_runs_depth_override_is_its_depth(url, tmp_path):
    record_scaling_series(url, tmp_path, dag_runs=1)
    sizes = store.read_sizes(url)
    assert set(sizes["depth_override"].isna()) == {True}
    sizes = sizes.assign(depth_override=20)
    assert set(stored.sized(store.history(url), sizes)["num_layers"]) == {20}


def test_efficiency_by_build_is_against_the_same_builds_one_device_variant(url, tmp_path):
    record_scaling_series(url, tmp_path, dag_runs=2, noise=0,
                          ran={"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.0"}})
    record_scaling_series(url, tmp_path, dag_runs=2, noise=0, first=2, link=0.4,
                          ran={"local": {"mxnet_asked": "mxnet==1.9.1", "mxnet_reported": "1.9.1"}})
    table = stored.efficiency_by_build(rows_of(url))
    assert list(table["build"]) == ["1.9.0"] * 3 + ["1.9.1"] * 3  # first measured first
    assert list(table["devices"]) == [1, 2, 4] * 2 and set(table["dag_runs"]) == {2}
    for link, build in ((0.2, "1.9.0"), (0.4, "1.9.1")):
        mine = table[table["build"] == build].set_index("devices")
        for w in (1, 2, 4):
            assert mine.loc[w, "samples_per_sec"] == pytest.approx(planted_speed(w, link=link))
            assert mine.loc[w, "scaling_efficiency"] == pytest.approx(0.5 / (0.5 + link * (w - 1) / w))


def test_no_efficiency_table_from_one_device_count(url, tmp_path):
    record_scaling_series(url, tmp_path, dag_runs=1)
    rows = rows_of(url)
    assert stored.efficiency_by_build(rows[rows["devices"] == 2]).empty
    assert stored.efficiency_by_build(pd.DataFrame()).empty

"""Bisect chains in the results store: a chain expects one set of params at a time, and moves on once."""
import pytest

from mxbench import store

PARAMS = {"only_variants": ["cpu1-bs64"], "launchers": ["local"], "good_build": "1.8.0.post0",
          "bad_build": "1.9.1", "probe_build": "", "bisect_runs": [], "min_drop": 0.05, "repeats": 5}


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def test_a_first_dag_run_mints_a_chain_once_and_a_retry_finds_it(url):
    chain_id = store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)
    assert store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS) == chain_id
    assert store.claim(url, "mxbench_bisect", "manual__2", "", PARAMS) != chain_id  # another bisect
    row = store.chain(url, chain_id)
    assert (row["starter_dag"], row["starter_run"], row["decided"]) == ("mxbench_bisect", "manual__1", 0)


def test_the_chain_expects_exactly_the_params_its_last_dag_run_handed_on(url):
    chain_id = store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)
    following = {**PARAMS, "probe_build": "1.9.0", "bisect_runs": [{"build": "1.8.0.post0", "run_id": "manual__1"}]}
    assert store.advance_chain(url, chain_id, PARAMS, following)
    assert not store.advance_chain(url, chain_id, PARAMS, following)  # moved on: the first step is decided
    assert store.claim(url, "mxbench_bisect", "any_run_id", chain_id, following) == chain_id
    for forged in ({**following, "min_drop": 0.9}, {**following, "bisect_runs": []}, PARAMS):
        with pytest.raises(store.ChainRefused, match=r"did not hand this DAG run these params \(1 DAG runs decided"):
            store.claim(url, "mxbench_bisect", "theirs", chain_id, forged)
    with pytest.raises(store.ChainRefused, match="is not one of mxbench_other's"):
        store.claim(url, "mxbench_other", "theirs", chain_id, following)
    assert store.advance_chain(url, chain_id, following, None)  # done
    with pytest.raises(store.ChainRefused, match=r"\(it is done\)"):
        store.claim(url, "mxbench_bisect", "late", chain_id, following)


def test_a_dag_run_outside_a_chain_carries_none_of_its_state(url):
    with pytest.raises(store.ChainRefused, match="leave all three empty"):
        store.claim(url, "mxbench_bisect", "manual__1", "", {**PARAMS, "probe_build": "1.9.0"})


def test_chains_over_a_range_are_found_by_who_started_them(url):
    store.start_chain(url, dag_id="mxbench_bisect", starter=("mxbench_bisect", "manual__x"), variant="cpu1-bs64",
                      launcher="local", good_build="a", bad_build="b", first_params=PARAMS)
    assert store.chains_over(url, "mxbench_bisect", "mxbench_regression", "cpu1-bs64", "local", "a", "b") == []
    store.start_chain(url, dag_id="mxbench_bisect", starter=("mxbench_regression", "scheduled__1"),
                      variant="cpu1-bs64", launcher="local", good_build="a", bad_build="b", first_params=PARAMS)
    (found,) = store.chains_over(url, "mxbench_bisect", "mxbench_regression", "cpu1-bs64", "local", "a", "b")
    assert found["starter_run"] == "scheduled__1"

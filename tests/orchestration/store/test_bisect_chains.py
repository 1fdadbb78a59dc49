"""Bisect chains in the results store: a chain expects one set of params at a time, moves on once
(a retry of the DAG run that moved it hands the same on again), and names its DAG runs unguessably."""
import re

import pytest

from mxbench import store

PARAMS = {"only_variants": ["cpu1-bs64"], "launchers": ["local"], "good_build": "1.8.0.post0",
          "bad_build": "1.9.1", "probe_build": "", "bisect_runs": [], "min_drop": 0.05, "repeats": 5}
FOLLOWING = {**PARAMS, "probe_build": "1.9.0", "bisect_runs": [{"build": "1.8.0.post0", "run_id": "manual__1"}]}


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def test_a_first_dag_run_mints_a_chain_once_and_a_retry_finds_it(url):
    chain = store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)
    assert store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)["chain_id"] == chain["chain_id"]
    assert store.claim(url, "mxbench_bisect", "manual__2", "", PARAMS)["chain_id"] != chain["chain_id"]
    row = store.chain(url, chain["chain_id"])
    assert (row["starter_dag"], row["starter_run"], row["decided"], row["claimed"]) == \
        ("mxbench_bisect", "manual__1", 0, True)


def test_the_chain_expects_exactly_the_params_its_last_dag_run_handed_on(url):
    chain_id = store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)["chain_id"]
    assert store.advance_chain(url, chain_id, "manual__1", PARAMS, FOLLOWING)
    assert store.advance_chain(url, chain_id, "manual__1", PARAMS, FOLLOWING)  # a retry of its decide
    assert not store.advance_chain(url, chain_id, "manual__copy", PARAMS, FOLLOWING)  # a copy: refused
    assert not store.advance_chain(url, chain_id, "manual__1", PARAMS, {**FOLLOWING, "min_drop": 0.9})
    assert store.claim(url, "mxbench_bisect", "manual__1", chain_id, PARAMS)["chain_id"] == chain_id  # its retry
    assert store.claim(url, "mxbench_bisect", "any_run_id", chain_id, FOLLOWING)["chain_id"] == chain_id
    for forged in ({**FOLLOWING, "min_drop": 0.9}, {**FOLLOWING, "bisect_runs": []}, PARAMS):
        with pytest.raises(store.ChainRefused, match=r"did not hand this DAG run these params \(1 DAG runs decided"):
            store.claim(url, "mxbench_bisect", "theirs", chain_id, forged)
    with pytest.raises(store.ChainRefused, match="is not one of mxbench_other's"):
        store.claim(url, "mxbench_other", "theirs", chain_id, FOLLOWING)
    assert store.advance_chain(url, chain_id, "manual__2", FOLLOWING, None, answered=True)  # done
    with pytest.raises(store.ChainRefused, match=r"\(it is done\)"):
        store.claim(url, "mxbench_bisect", "late", chain_id, FOLLOWING)


def test_a_dag_run_outside_a_chain_carries_none_of_its_state(url):
    with pytest.raises(store.ChainRefused, match="leave all three empty"):
        store.claim(url, "mxbench_bisect", "manual__1", "", {**PARAMS, "probe_build": "1.9.0"})


def test_run_ids_are_the_same_on_a_retry_and_differ_between_chains(url):
    first = store.chain(url, store.claim(url, "mxbench_bisect", "manual__1", "", PARAMS)["chain_id"])
    second = store.chain(url, store.claim(url, "mxbench_bisect", "manual__2", "", PARAMS)["chain_id"])
    assert store.run_id_for(first, "manual__1__probe1", 1) == store.run_id_for(first, "manual__1__probe1", 1)
    assert re.fullmatch(r"manual__1__probe1__[0-9a-f]{8}", store.run_id_for(first, "manual__1__probe1", 1))
    assert store.run_id_for(first, "p", 1) != store.run_id_for(second, "p", 1) != store.run_id_for(second, "p", 2)
    assert first["salt"] not in str(store.run_id_for(first, "p", 1))


def test_which_chains_stand_for_their_range(url):
    def started(**state):
        chain_id = store.start_chain(url, dag_id="mxbench_bisect", starter=("mxbench_regression", "scheduled__1"),
                                     starter_kind="scheduled", variant="v", launcher="local", good_build="a",
                                     bad_build="b", first_params=PARAMS)
        if state.get("claimed"):
            store.claim(url, "mxbench_bisect", "r", chain_id, PARAMS)
        if "done" in state:
            store.advance_chain(url, chain_id, "r", PARAMS, None, answered=state["done"])
        return store.chain(url, chain_id)

    assert not store.blocks_range(started())  # its trigger failed: its first DAG run never began
    assert store.blocks_range(started(claimed=True))
    assert store.blocks_range(started(claimed=True, done=True))  # it named the first bad build
    assert not store.blocks_range(started(claimed=True, done=False))  # ended without an answer
    assert len(store.chains_over(url, "mxbench_bisect", "mxbench_regression", "v", "local", "a", "b")) == 4
    assert store.chains_over(url, "mxbench_bisect", "mxbench_benchmark", "v", "local", "a", "b") == []


@pytest.mark.parametrize("run_type, conf, stands", [
    ("scheduled", {}, True), ("backfill", None, True), ("backfill", {}, True),
    ("backfill", {"min_drop": 0.9}, False),  # a trigger user's settings
    ("scheduled", {"repeats": 2}, False), ("manual", {}, False), ("asset_triggered", {}, False),
])
def test_only_the_nightlys_own_dag_runs_mint_chains_that_stand_for_a_range(url, run_type, conf, stands):
    kind = store.starter_kind(run_type, conf)
    assert len(kind) <= 20  # the column's width
    chain_id = store.start_chain(url, dag_id="mxbench_bisect", starter=("mxbench_regression", "r"),
                                 starter_kind=kind, variant="v", launcher="local", good_build="a",
                                 bad_build="b", first_params=PARAMS)
    store.claim(url, "mxbench_bisect", "r", chain_id, PARAMS)
    assert store.blocks_range(store.chain(url, chain_id)) is stands

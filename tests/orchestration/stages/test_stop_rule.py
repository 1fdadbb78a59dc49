"""Stop when sure: an optional round is skipped once every launcher pair of its variant is
settled by the rounds before it, read from the runs' own logs; the tables, the verdicts and the
DAG run's failures treat a skipped round as no run, never as a failed one."""
import random

import pandas as pd
import pytest

from mxbench.matrix.variants import Target, expand_runs
from mxbench.results.metrics import launcher_ratios, summarise
from mxbench.run_folder import DagRunFolder, write_json
from mxbench.stages import pipeline, stop_rule
from mxbench.stages.dag_run_failures import failed_runs
from mxbench.stages.run_stage import record_skip

TARGETS = {"local": Target("local", 1, 0, one_machine=True), "ssh": Target("ssh", 1, 0)}
PARAMS = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local", "ssh"],
          "repeats": 6, "max_repeats": 8, "target_gap": 0.10}


def speed_log(samples_per_sec: float) -> str:
    lines = []
    for epoch, cost in ((0, 9.0), (1, 6.0)):
        lines += [f"INFO:root:Epoch[{epoch}] Batch [{b}]\tSpeed: {samples_per_sec:.2f} samples/sec\taccuracy=0.1"
                  for b in (20, 40)]
        lines += [f"INFO:root:Epoch[{epoch}] Time cost={cost:.3f}", f"INFO:root:Epoch[{epoch}] Validation-accuracy=0.2"]
    return "\n".join(lines) + "\n"


def quiet_host() -> str:
    """The run_end event of a worker whose host had no other work (``results.contention``)."""
    from mxbench_train.events import format_event

    return format_event("run_end", rank=0, status="ok", host={"host": "box", "wall_s": 10.0, "foreign_cpu_s": 0.0,
                                                               "steal": 0.0}) + "\n"


def ran(dag_dir, run, speed, t):
    """Run ``run`` as a finished, measured run started at ``t``."""
    folder = dag_dir / run["key"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rank0.log").write_text(speed_log(speed) + quiet_host())
    write_json(folder / "meta.json", {"key": run["key"], "variant": run["variant"], "launcher": run["launcher"],
                                      "repeat": run["repeat"], "status": "ok", "started_at": t, "ended_at": t + 1,
                                      "duration_s": 1.0})


def dag_run(tmp_path, ssh_over_local, spread, rounds=6, params=PARAMS, seed=1):
    """A DAG run folder whose first ``rounds`` rounds ran, in expansion order, ssh at
    ``ssh_over_local`` of local with per-run noise ``spread``; returns (folder, runs)."""
    runs = expand_runs(params, TARGETS)
    write_json(tmp_path / "request.json", {"runs": runs, "params": params})
    write_json(tmp_path / "data.json", {"records": {"train": 1000}})
    rng = random.Random(seed)
    for t, run in enumerate(r for r in runs if r["round"] <= rounds):
        base = 1000.0 * (ssh_over_local if run["launcher"] == "ssh" else 1.0)
        ran(tmp_path, run, base * (1 + rng.gauss(0, spread)), 10.0 * t)
    return tmp_path, runs


def round_of(runs, r):
    return [run for run in runs if run["round"] == r]


def rounds_after(runs, r):
    """The runs of every round after ``r`` (up to max_repeats and the replacement rounds beyond it)."""
    return [run for run in runs if run["round"] > r]


def skip_after(dag_dir, runs, r, why="skipped: not needed"):
    for run in rounds_after(runs, r):
        record_skip(run, DagRunFolder(dag_dir), why)


def test_runs_beyond_repeats_are_optional_up_to_the_budget():
    """Up to max_repeats (8), and the contended rounds' own budget beyond it (default: half of 8)."""
    runs = expand_runs(PARAMS, TARGETS)
    assert [(r["round"], r["optional"]) for r in runs if r["launcher"] == "ssh"] == [
        (r, r > 6) for r in range(1, 13)]
    runs = expand_runs({**PARAMS, "contended_replacements": 0}, TARGETS)
    assert max(r["round"] for r in runs) == 8


def test_a_settled_variant_skips_its_optional_round_saying_why(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    first, second = round_of(runs, 7)
    reason = stop_rule.skip_reason(first, DagRunFolder(dag_dir))
    assert reason.startswith("round 7 of cpu1-bs64 skipped: ssh/local stopped after 6 rounds: the first 6 "
                             "rounds' spread gives ±")
    # both runs of a round decide alike, whatever ran meanwhile: only the first stage counts
    ran(dag_dir, first, 500.0, 1000.0)
    assert stop_rule.skip_reason(second, DagRunFolder(dag_dir)) == reason


def test_a_noisy_variant_runs_its_optional_round(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.08)
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None


def test_a_round_that_cannot_be_paired_is_never_settled(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    write_json(dag_dir / runs[3]["key"] / "meta.json", {"status": "failed", "cause": "the trainer crashed"})
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None


def test_earlier_rounds_not_run_yet_mean_run_it(tmp_path):
    # dags test runs mapped instances in any order: round 7 may come before round 6 ran
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, rounds=5)
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None


def test_earlier_rounds_are_fetched_from_the_artifact_store_when_not_here(tmp_path):
    store, _ = dag_run(tmp_path / "store", 0.95, spread=0.002)
    here = tmp_path / "worker"
    here.mkdir()
    for name in ("request.json", "data.json"):
        (here / name).write_bytes((store / name).read_bytes())
    runs = expand_runs(PARAMS, TARGETS)
    fetched = []

    def fetch(key, into):
        fetched.append(key)
        (into / key).mkdir(parents=True)
        for f in (store / key).iterdir():
            (into / key / f.name).write_bytes(f.read_bytes())

    reason = stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(here), fetch_unit=fetch)
    assert reason and len(fetched) == 12 and not list(here.glob("cpu1-bs64__*"))


def test_a_skipped_round_is_no_run_in_the_tables_and_no_failure(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    for run in rounds_after(runs, 6):
        record_skip(run, DagRunFolder(dag_dir), stop_rule.skip_reason(run, DagRunFolder(dag_dir)))
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv")
    skipped = table[table["status"] == "skipped"]
    assert len(skipped) == 12 and skipped["cause"].str.contains("stopped after 6 rounds").all()
    summary = summarise(table)
    assert list(summary["runs_ok"]) == [6, 6] and list(summary["runs_failed"]) == [0, 0]
    assert failed_runs(DagRunFolder(dag_dir)) == []
    pipeline.join(DagRunFolder(dag_dir))
    (row,) = pd.read_csv(dag_dir / "tables" / "ratios.csv").to_dict("records")
    assert row["n"] == 6 and row["analysis"].startswith("paired")
    assert row["stopping"].startswith("stopped after 6 rounds: the first 6 rounds' spread gives ±")
    assert row["analysis"] == "paired, 6 rounds, two-stage (spread of the first 6), t test (normality check passed)"
    from mxbench.report import build_report

    report = open(build_report(DagRunFolder(dag_dir))["markdown"]).read()
    verdicts = report.split("## Verdicts", 1)[1].split("## ", 1)[0]
    assert "6 rounds paired" in verdicts and "stopped after 6 rounds" in verdicts
    assert "__r7" not in report.split("## Failed runs", 1)[1].split("## ", 1)[0]


def test_a_budget_spent_says_what_gap_the_rounds_could_detect(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.05, rounds=8)
    skip_after(dag_dir, runs, 8)
    pipeline.parse_all(DagRunFolder(dag_dir))
    ratios = launcher_ratios(pd.read_csv(dag_dir / "tables" / "runs.csv"), budget=(6, 8, 0.02))
    (stopping,) = ratios["stopping"]
    assert stopping.startswith("budget spent: 8 rounds give ±") and stopping.endswith("> ±1.0% (target gap 2%)")
    assert launcher_ratios(pd.read_csv(dag_dir / "tables" / "runs.csv"))["stopping"].isna().all()


@pytest.mark.parametrize("bad", [{"max_repeats": 4}, {"max_repeats": 8, "target_gap": None}])
def test_a_budget_below_repeats_or_without_a_target_is_refused(bad):
    from mxbench.matrix.variants import VariantError

    with pytest.raises(VariantError):
        expand_runs({**PARAMS, **bad}, TARGETS)


def test_the_run_task_skips_a_settled_optional_round_and_runs_a_mandatory_one(tmp_path):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowSkipException

    from mxbench.airflow_glue.operators import RunVariantOperator
    from mxbench.run_folder import read_json

    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    context = {"params": {"run_timeout_minutes": 5, "target_gap": PARAMS["target_gap"]},
               "dag_run": SimpleNamespace(dag_id="mxbench_benchmark"), "run_id": "manual__1"}
    optional = round_of(runs, 7)[0]
    with pytest.raises(AirflowSkipException, match="round 7 of cpu1-bs64 skipped: ssh/local stopped after 6"):
        RunVariantOperator(task_id="t", run=optional).run_in(DagRunFolder(dag_dir), context, {})
    assert read_json(dag_dir / optional["key"] / "meta.json")["status"] == "skipped"
    # a round within repeats is never checked: it is reused as measured
    RunVariantOperator(task_id="t", run=round_of(runs, 6)[0]).run_in(DagRunFolder(dag_dir), context, {})
    assert read_json(dag_dir / round_of(runs, 6)[0]["key"] / "meta.json")["reused"] is True


def test_rounds_in_the_same_order_every_time_are_not_paired(tmp_path):
    # a drift adds to the side that always runs second: DAG runs from before counterbalancing
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, params={k: v for k, v in PARAMS.items()
                                                                   if k not in ("max_repeats", "target_gap")})
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv")
    table = table.assign(started_at=[10.0 * r + (who == "ssh") for r, who in zip(table["repeat"], table["launcher"])])
    table = table.assign(ended_at=table["started_at"] + 0.5)
    (row,) = launcher_ratios(table).to_dict("records")
    assert row["analysis"] == "unpaired: not counterbalanced: ssh ran first in 0 of 6 rounds"


def test_a_round_with_one_run_skipped_is_left_out_not_the_pairing(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, rounds=6)
    first, second = round_of(runs, 7)
    ran(dag_dir, first, 1000.0, 1000.0)  # a retry let one run of round 7 start before its plan was known
    for run in (second, *rounds_after(runs, 7)):
        record_skip(run, DagRunFolder(dag_dir), "skipped: settled")
    pipeline.parse_all(DagRunFolder(dag_dir))
    (row,) = launcher_ratios(pd.read_csv(dag_dir / "tables" / "runs.csv"), budget=(6, 8, 0.1)).to_dict("records")
    assert row["n"] == 6 and row["analysis"].startswith("paired, 6 rounds")


def test_a_dag_run_whose_unneeded_rounds_were_skipped_is_stored_as_ok(tmp_path):
    import sqlalchemy as sa

    from mxbench import store

    dag_dir, runs = dag_run(tmp_path / "run", 0.95, spread=0.002)
    for run in rounds_after(runs, 6):
        record_skip(run, DagRunFolder(dag_dir), stop_rule.skip_reason(run, DagRunFolder(dag_dir)))
    pipeline.parse_all(DagRunFolder(dag_dir))
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__1", trigger="manual")
    with sa.create_engine(url).connect() as db:
        assert db.execute(sa.text("select state, runs_ok, runs_failed from dag_runs")).one() == ("ok", 12, 0)
        assert db.execute(sa.text("select count(*) from repeats where status = 'skipped'")).scalar() == 12


def test_a_pair_that_ran_more_rounds_than_it_needed_says_why(tmp_path):
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, rounds=7)
    skip_after(dag_dir, runs, 7)
    pipeline.parse_all(DagRunFolder(dag_dir))
    ratios = launcher_ratios(pd.read_csv(dag_dir / "tables" / "runs.csv"), budget=(6, 8, 0.1))
    (stopping,) = ratios["stopping"]
    assert stopping.startswith("stopped after 6 rounds") and stopping.endswith(
        "; 1 more ran, as another pair of the variant needed (round 7 at 95.0%): reported, not in this pair's verdict")
    assert ratios["n"].tolist() == [6]  # judged on the rounds its own plan asked for


def contend(dag_dir, run, foreign_cores=0.9):
    """Say in ``run``'s log what its worker saw: another process used ``foreign_cores`` of a core."""
    from mxbench_train.events import format_event

    log = dag_dir / run["key"] / "rank0.log"
    log.write_text(log.read_text() + format_event("run_end", rank=0, status="ok", host={
        "host": "box", "wall_s": 10.0, "foreign_cpu_s": 10.0 * foreign_cores, "steal": 0.0}) + "\n")


def test_a_contended_round_of_the_first_stage_is_replaced_by_one_more(tmp_path):
    """The first stage is settled in 6 rounds; one of them had a hog beside it: round 7 runs in its
    place (the first stage is the first 6 quiet rounds), round 8 is skipped, saying which round was
    replaced."""
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    contend(dag_dir, round_of(runs, 3)[1])
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None
    # round 8 waits for round 7: until it ends, the first stage's quiet rounds are not all there
    assert stop_rule.skip_reason(round_of(runs, 8)[0], DagRunFolder(dag_dir)) is None
    play(dag_dir, runs, [7], 0.95)
    reason = stop_rule.skip_reason(round_of(runs, 8)[0], DagRunFolder(dag_dir))
    assert reason.startswith("round 8 of cpu1-bs64 skipped: ssh/local stopped after 6 rounds: the first 6 rounds'")
    assert reason.endswith("; 1 contended round(s) replaced (3): 7 rounds in all")


def play(dag_dir, runs, rounds, ssh_over_local, contended=(), t0=500.0):
    """Run each of ``rounds`` as the run task would: a round the stop rule skips is recorded as
    skipped; the others run (ssh at ``ssh_over_local`` of local), the ``contended`` ones with a hog
    beside their ssh run. Returns the rounds that ran."""
    ran_rounds = []
    for r in rounds:
        for i, run in enumerate(round_of(runs, r)):
            reason = stop_rule.skip_reason(run, DagRunFolder(dag_dir))
            if reason:
                record_skip(run, DagRunFolder(dag_dir), reason)
                continue
            ran(dag_dir, run, 1000.0 * (ssh_over_local if run["launcher"] == "ssh" else 1.0), t0 + 10 * r + i)
            if r in contended and run["launcher"] == "ssh":
                contend(dag_dir, run)
            ran_rounds.append(r)
    return sorted(set(ran_rounds))


def test_four_of_six_first_rounds_contended_are_replaced_from_their_own_budget(tmp_path):
    """A neighbour over rounds 1-4 (4 of the 6 first rounds, as a busy loop in a real demo): the
    first stage is the first 6 quiet rounds, so rounds 7-10 run in their place, from the
    replacement budget (default: half of max_repeats, 4), not max_repeats'; rounds 11 and 12 are
    skipped saying so. The whole path: expand -> the runs' own logs -> the stop rule -> the runs
    table -> the verdict, which judges the 6 quiet rounds and names the 4 it left out."""
    from mxbench.matrix.variants import stop_budget

    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    for r in (1, 2, 3, 4):
        contend(dag_dir, round_of(runs, r)[r % 2])  # local's run in some rounds, ssh's in others
    assert play(dag_dir, runs, range(7, 13), 0.95) == [7, 8, 9, 10]
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv")
    assert sorted(table.loc[table["contended"].fillna(False).astype(bool), "repeat"]) == [1, 2, 3, 4]
    skipped = table[table["status"] == "skipped"]
    assert sorted(skipped["repeat"]) == [11, 11, 12, 12]
    assert skipped["cause"].str.contains("4 contended round(s) replaced (1, 2, 3, 4): 10 rounds in all",
                                         regex=False).all()
    pipeline.join(DagRunFolder(dag_dir))
    (line,) = pd.read_csv(dag_dir / "tables" / "ratios.csv").itertuples()
    assert stop_budget(PARAMS) == (6, 8, 0.10, 4)
    assert line.n == 6 and line.ratio == pytest.approx(0.95, rel=0.01)
    assert "4 contended round(s) (other work on their hosts: 1, 2, 3, 4) left out of the verdict" in line.verdict
    assert line.stopping.startswith("stopped after 6 rounds: the first 6 rounds' spread gives ±")
    assert line.stopping.endswith("; 4 contended round(s) replaced (1, 2, 3, 4), of the 4 the replacement budget "
                                  "allows")


def test_with_a_replacement_budget_of_0_contended_rounds_are_judged_as_measured_and_said_so(tmp_path):
    """contended_replacements 0: nothing beyond max_repeats. 4 of the first 6 rounds contended leave
    no quiet first stage to plan fewer rounds with, so all 8 run; 4 quiet rounds are too few to judge
    without the contended ones, so they are judged as measured, and the stopping line and verdict
    say so."""
    params = {**PARAMS, "contended_replacements": 0}
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, params=params)
    assert max(run["round"] for run in runs) == 8
    for r in (1, 2, 3, 4):
        contend(dag_dir, round_of(runs, r)[1])
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None
    assert play(dag_dir, runs, range(7, 9), 0.95) == [7, 8]
    pipeline.parse_all(DagRunFolder(dag_dir))
    pipeline.join(DagRunFolder(dag_dir))
    (line,) = pd.read_csv(dag_dir / "tables" / "ratios.csv").itertuples()
    assert line.n == 6  # the rounds the first 6 planned, contended ones in; 7 and 8 reported, not judged
    assert "4 of 8 rounds contended (other work on their hosts: rounds 1, 2, 3, 4), judged as measured" in line.verdict
    assert ("; 4 contended round(s) (1, 2, 3, 4) judged as measured: more than the 0 the replacement budget "
            "(contended_replacements) allows") in line.stopping


def test_a_contended_round_is_left_out_of_the_verdict_and_said_so_when_it_was_replaced(tmp_path):
    """Round 3's ssh run slowed to 70% by a hog: judged on the quiet rounds (the replacement among
    them), ssh is not called different from its real 95%; the line names the round."""
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, rounds=7)
    (slow,) = [run for run in round_of(runs, 3) if run["launcher"] == "ssh"]
    (dag_dir / slow["key"] / "rank0.log").write_text(speed_log(700.0) + quiet_host())
    contend(dag_dir, slow)
    skip_after(dag_dir, runs, 7, "settled")
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv")
    assert table.loc[table["repeat"] == 3, "contended"].any()
    (line,) = launcher_ratios(table, budget=(6, 8, 0.10, 4)).itertuples()
    assert line.n == 6 and line.ratio == pytest.approx(0.95, rel=0.01)
    assert "1 contended round(s) (other work on their hosts: 3) left out of the verdict" in line.verdict
    assert line.stopping.startswith("stopped after 6 rounds: the first 6 rounds' spread gives ±"), line.stopping
    assert line.stopping.endswith("; 1 contended round(s) replaced (3), of the 4 the replacement budget allows")


def test_with_no_budget_left_a_contended_round_is_judged_as_measured_and_what_it_did_is_said(tmp_path):
    params = {**PARAMS, "max_repeats": 6}
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002, params=params)
    contend(dag_dir, round_of(runs, 2)[0])
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv")
    (line,) = launcher_ratios(table, budget=(6, 6, 0.10)).itertuples()
    assert line.n == 6  # never a silent drop
    # 5 quiet rounds: fewer than a paired test needs (``floors.rounds_needed``)
    assert line.verdict.endswith(". 1 of 6 rounds contended (other work on their hosts: round 2), judged as "
                                 "measured; without them too few rounds to judge")


def test_a_contended_replacement_round_is_itself_replaced_within_the_budget(tmp_path):
    """Round 3 contended, round 7 runs in its place; round 7 contended too (it has ended): round 8
    runs in its place; round 8 quiet: the 6 quiet rounds are there, round 9 is skipped."""
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    contend(dag_dir, round_of(runs, 3)[1])
    for t, run in enumerate(round_of(runs, 7)):
        ran(dag_dir, run, 1000.0 * (0.95 if run["launcher"] == "ssh" else 1.0), 500.0 + 10 * t)
    contend(dag_dir, round_of(runs, 7)[0])
    assert stop_rule.skip_reason(round_of(runs, 8)[0], DagRunFolder(dag_dir)) is None
    play(dag_dir, runs, [8], 0.95)
    assert stop_rule.skip_reason(round_of(runs, 9)[0], DagRunFolder(dag_dir)).endswith(
        "; 2 contended round(s) replaced (3, 7): 8 rounds in all")


def test_the_dag_runs_contention_thresholds_judge_the_stop_rule_and_the_tables_alike(tmp_path):
    """0.1 of a core beside round 3: under the defaults (0.25) no contention, round 7 is skipped;
    with this hardware's A/A thresholds in request.json (0.06) the round is contended, round 7 runs
    in its place, and the runs table says so with the thresholds it was judged with."""
    from mxbench.results import contention
    from mxbench.results.machines import fingerprint
    from mxbench.run_folder import read_json
    from mxbench_train.events import format_event

    box = {"cpu_model": "EPYC", "cpu_count": 2, "gpu": {"available": False}}
    dag_dir, runs = dag_run(tmp_path, 0.95, spread=0.002)
    hogged = round_of(runs, 3)[1]
    log = dag_dir / hogged["key"] / "rank0.log"
    log.write_text(format_event("run_start", rank=0, environment=box) + "\n" + log.read_text())
    contend(dag_dir, hogged, foreign_cores=0.1)
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)).startswith("round 7 of cpu1-bs64 skipped")

    strict = contention.Thresholds(0.06, 0.01, "from 9 A/A runs on this hardware (1 calibration)")
    request = read_json(dag_dir / "request.json")
    # ssh's runs on this machine; local's would still be judged with the defaults
    table = {contention.table_key(fingerprint(box)[0], hogged["launcher"]): strict.as_dict()}
    write_json(dag_dir / "request.json", {**request, "contention_thresholds": table})
    assert stop_rule.skip_reason(round_of(runs, 7)[0], DagRunFolder(dag_dir)) is None  # round 3 is replaced
    for run in runs[len(round_of(runs, 1)) * 6:]:
        record_skip(run, DagRunFolder(dag_dir), "not run in this test")
    pipeline.parse_all(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert bool(table.loc[hogged["key"], "contended"]) and table.loc[hogged["key"], "contention"] == (
        "other processes used 0.10 cores")
    assert table.loc[hogged["key"], "contention_thresholds"] == str(strict)
    # the others, whose trainers did not say their machine, keep the defaults
    assert set(table["contention_thresholds"].dropna()) == {str(strict), str(contention.DEFAULTS)}

"""Confirm before alerting, and control false alerts (issue 21 §3): the regression DAG's
confirmation rounds run only where the first rounds look like a regression against the baseline;
across the series of one DAG run Benjamini–Hochberg keeps a regression only where its q is below
α; and the report's false alerts per month come from the measured noise."""
import numpy as np
import pandas as pd
import pytest

from mxbench.matrix.variants import Target, budget, expand_runs
from mxbench.regression import regression_rule
from mxbench.run_folder import DagRunFolder, write_json
from mxbench.stages import stop_rule
from mxbench_train.events import format_event

TARGETS = {"local": Target("local", 1, 0, one_machine=True)}
PARAMS = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local"], "repeats": 4,
          "confirm_rounds": 4, "baseline_runs": 5, "min_drop": 0.05}
MACHINE = {"cpu_model": "Test CPU", "cpu_count": 2, "gpu": {"available": False}}


def speed_log(samples_per_sec: float) -> str:
    lines = [format_event("run_start", rank=0, environment=MACHINE)]  # the machine, as the trainer tells it
    for epoch, cost in ((0, 9.0), (1, 6.0)):
        lines += [f"INFO:root:Epoch[{epoch}] Batch [{b}]\tSpeed: {samples_per_sec:.2f} samples/sec\taccuracy=0.1"
                  for b in (20, 40)]
        lines += [f"INFO:root:Epoch[{epoch}] Time cost={cost:.3f}"]
    return "\n".join(lines) + "\n"


def first_rounds(tmp_path, speeds, status="ok"):
    """A regression DAG run's folder whose first rounds ran at ``speeds``; returns its runs."""
    runs = expand_runs(PARAMS, TARGETS)
    write_json(tmp_path / "request.json", {"runs": runs, "params": PARAMS})
    write_json(tmp_path / "data.json", {"records": {"train": 1000}})
    for t, (run, speed) in enumerate(zip([r for r in runs if not r["optional"]], speeds)):
        folder = tmp_path / run["key"]
        folder.mkdir()
        (folder / "rank0.log").write_text(speed_log(speed))
        write_json(folder / "meta.json", {"key": run["key"], "status": status, "started_at": 10.0 * t,
                                          "ended_at": 10.0 * t + 5})
    return runs


def stored_baseline(level, dag_runs=5, repeats=4):
    rng = np.random.default_rng(0)
    return pd.DataFrame({"dag_id": "mxbench_regression", "run_id": [f"day{d}" for d in range(dag_runs)
                                                                    for _ in range(repeats)],
                         "samples_per_sec": level * (1 + rng.normal(0, 0.01, dag_runs * repeats))})


def confirmation(runs):
    return next(r for r in runs if r["optional"])


def test_the_regression_dag_expands_confirmation_rounds_after_its_repeats():
    runs = expand_runs(PARAMS, TARGETS)
    assert budget(PARAMS) == (4, 8)
    assert [(r["round"], r["optional"]) for r in runs] == [(r, r > 4) for r in range(1, 9)]


def test_a_suspected_regression_gets_its_confirmation_rounds(tmp_path):
    runs = first_rounds(tmp_path, [960.0, 955.0, 965.0, 950.0])  # about 4% below the baseline
    asked = []

    def baseline_for(variant, launcher, machine, setup):
        asked.append((variant, launcher, machine))
        return stored_baseline(1000.0)

    assert stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path), baseline_for=baseline_for) is None
    (variant, launcher, machine), = asked
    assert (variant, launcher) == ("cpu1-bs64", "local") and len(machine) == 16  # the store's fingerprint


def test_first_rounds_at_the_baseline_skip_the_confirmation_saying_why(tmp_path):
    runs = first_rounds(tmp_path, [995.0, 1002.0, 990.0, 1004.0])
    reason = stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path),
                                   baseline_for=lambda *_: stored_baseline(1000.0))
    assert reason.startswith("confirmation round 5 of cpu1-bs64 (local) skipped: the first rounds' median is ")
    assert "not a suspected regression (at most -2.5%)" in reason


def test_no_baseline_or_nothing_measured_leaves_nothing_to_confirm(tmp_path):
    runs = first_rounds(tmp_path, [900.0] * 4)
    one_run = stored_baseline(1000.0, dag_runs=1)
    reason = stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path), baseline_for=lambda *_: one_run)
    assert "no baseline on this hardware to confirm against (1 earlier DAG run(s), 2 needed)" in reason
    failed = first_rounds(tmp_path / "failed", [900.0] * 4, status="failed")
    assert "measured nothing to confirm" in stop_rule.skip_reason(confirmation(failed),
                                                                  DagRunFolder(tmp_path / "failed"),
                                                                 baseline_for=lambda *_: stored_baseline(1000.0))


def test_a_confirmation_round_whose_first_rounds_are_still_running_runs(tmp_path):
    runs = first_rounds(tmp_path, [1000.0] * 4, status="running")
    assert stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path),
                                 baseline_for=lambda *_: stored_baseline(1000.0)) is None


def test_a_regression_that_does_not_hold_across_the_series_checked_is_not_called():
    def finding(status, p):
        return regression_rule.Finding("v", "l", status, p_value=p, message=f"v (l): {status}: 900 against 1000")

    lone = regression_rule.controlled([finding("regression", 0.03)])[0]
    assert (lone.status, lone.q_value) == ("regression", 0.03)
    crowd = regression_rule.controlled([finding("regression", 0.03)] + [finding("ok", 0.5) for _ in range(5)])
    assert crowd[0].status == "ok" and crowd[0].q_value == pytest.approx(0.18)
    assert crowd[0].message.startswith("v (l): ok: ") and "not across the 6 series checked" in crowd[0].message
    strong = regression_rule.controlled([finding("regression", 0.001)] + [finding("ok", 0.5) for _ in range(5)])
    assert strong[0].status == "regression"


def test_suspicion_is_half_the_smallest_drop():
    assert regression_rule.suspected([970.0] * 4, [1000.0] * 20, 0.05) == (True, pytest.approx(0.97))
    assert regression_rule.suspected([980.0] * 4, [1000.0] * 20, 0.05)[0] is False


def test_false_alerts_per_month_follow_the_noise_and_fall_with_confirmation():
    quiet = regression_rule.false_alert_chance(0.02, 8, 20, first=4)
    noisy = regression_rule.false_alert_chance(0.09, 8, 20, first=4)
    assert 0 < quiet < noisy < regression_rule.false_alert_chance(0.09, 8, 20) == pytest.approx(0.025)
    findings = pd.DataFrame({"noise_cv": [0.02, 0.09, None], "n": [8, 8, 4], "n_baseline": [20, 20, 20]})
    assert regression_rule.false_alerts_per_month(findings, first=4) == pytest.approx(30 * (quiet + noisy))
    assert regression_rule.false_alerts_per_month(findings.assign(noise_cv=None)) is None
    # confirmation rounds skipped tonight (n = 4): a series that alerts would have run them
    skipped = findings.assign(n=4)
    assert regression_rule.false_alerts_per_month(skipped, first=4, rounds=8) == pytest.approx(30 * (quiet + noisy))
    assert regression_rule.false_alerts_per_month(skipped, first=4) == pytest.approx(30 * 2 * 0.025)


def test_the_estimate_is_near_a_simulation_of_the_rule():
    """The normal approximation against the rule itself on noise: same order (it is an upper
    estimate: the interval and the minimum drop only lower the real rate)."""
    rng = np.random.default_rng(3)
    cv, trials, alerts = 0.09, 400, 0
    for _ in range(trials):
        baseline = list(1000 * np.exp(rng.normal(0, cv, 20)))
        current = list(1000 * np.exp(rng.normal(0, cv, 4)))
        if regression_rule.suspected(current, baseline)[0]:
            current += list(1000 * np.exp(rng.normal(0, cv, 4)))
        alerts += regression_rule.check("v", "l", current, baseline, [f"r{i // 4}" for i in range(20)]).status \
            == "regression"
    estimate = regression_rule.false_alert_chance(cv, 8, 20, first=4)
    assert alerts / trials <= estimate + 0.02


def test_the_report_gives_the_false_alerts_to_expect_from_the_noise(tmp_path):
    from mxbench.report import false_alert_line

    write_json(tmp_path / "request.json", {"params": PARAMS})
    findings = pd.DataFrame({"noise_cv": [0.02, 0.09], "n": [4, 4], "n_baseline": [20, 20]})
    expected = 30 * (regression_rule.false_alert_chance(0.02, 8, 20, first=4)
                     + regression_rule.false_alert_chance(0.09, 8, 20, first=4))
    line = false_alert_line(DagRunFolder(tmp_path), findings)
    assert line.startswith(f"At most about {expected:.2g} a month") and "with 4 confirmation rounds" in line
    assert false_alert_line(DagRunFolder(tmp_path), findings.assign(noise_cv=None)).startswith("Not known")


def busy_host() -> str:
    """The run_end event of a worker whose host had a neighbour using 0.9 of a core (contended)."""
    return format_event("run_end", rank=0, status="ok", host={"host": "box", "wall_s": 10.0, "foreign_cpu_s": 9.0,
                                                               "steal": 0.0}) + "\n"


def test_contended_first_rounds_neither_clear_nor_raise_a_suspicion_quiet_rounds_confirm(tmp_path):
    """First rounds at the baseline, two of four with a neighbour on their host: two quiet ones
    cannot clear the series, so the confirmation rounds run (an alert needs quiet rounds); with one
    contended, the three quiet ones clear it and the reason counts the one left out."""
    runs = first_rounds(tmp_path, [995.0, 1002.0, 990.0, 1004.0])
    first = [r for r in runs if not r["optional"]]
    for run in first[:2]:
        log = tmp_path / run["key"] / "rank0.log"
        log.write_text(log.read_text() + busy_host())
    baseline = lambda *_: stored_baseline(1000.0)  # noqa: E731
    assert stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path), baseline_for=baseline) is None
    (tmp_path / first[1]["key"] / "rank0.log").write_text(speed_log(1002.0))
    reason = stop_rule.skip_reason(confirmation(runs), DagRunFolder(tmp_path), baseline_for=baseline)
    assert "not a suspected regression" in reason
    assert reason.endswith("; 1 contended run left out (other work on their hosts)")

"""benchmarks/verdict_power.py: its noise model read from an A/A calibration's JSON, and its
two-stage row, which must call no more false differences than α at no drift. Seeded, small."""
import importlib.util
import json
import math

import numpy as np
import pytest

from conftest import REPO
from mxbench.stats.verdict import ALPHA

spec = importlib.util.spec_from_file_location("verdict_power", REPO / "benchmarks" / "verdict_power.py")
verdict_power = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verdict_power)


def write(tmp_path, data, name="aa_noise.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_noise_from_a_flat_file_gives_its_cv_drift_and_source(tmp_path):
    path = write(tmp_path, {"cv": 0.013, "drift_per_run": -0.001, "source": "A/A run 2024-05-01"})
    cv, drift, where = verdict_power.noise_from(path)
    assert (cv, drift) == (0.013, -0.001)
    assert str(path) in where and "A/A run 2024-05-01" in where


def test_noise_from_entries_gives_the_medians_and_leaves_out_unmeasured_ones(tmp_path):
    entries = [{"variant": "v1", "launcher": "local", "cv": 0.01, "drift_per_run": 0.002},
               {"variant": "v1", "launcher": "ssh", "cv": 0.03, "drift_per_run": -0.001},
               {"variant": "v1", "launcher": "kubernetes", "cv": 0.02, "drift_per_run": 0.0005},
               {"variant": "v2", "launcher": "ssh", "cv": None, "drift_per_run": None}]
    cv, drift, where = verdict_power.noise_from(write(tmp_path, {"entries": entries}))
    assert (cv, drift) == (0.02, 0.0005)
    assert "median of 3" in where and "1 with no cv or drift left out" in where


@pytest.mark.parametrize("content, says", [
    ("{not json", "not JSON"),
    ([0.02, 0.001], "got a JSON list"),
    ({"cv": 0.02}, "drift_per_run"),
    ({"cv": "2%", "drift_per_run": 0.0}, "cv must be a finite number"),
    ({"cv": 0.0, "drift_per_run": 0.0}, "no run-to-run spread"),
    ({"entries": []}, "none of its 0 entries"),
    ({"entries": [{"variant": "v1", "launcher": "ssh", "cv": 0.02, "drift_per_run": "up"}]},
     "drift_per_run (entry v1/ssh) must be a finite number"),
])
def test_a_malformed_noise_file_is_refused_naming_the_file(tmp_path, content, says):
    path = write(tmp_path, content)
    with pytest.raises(ValueError) as refused:
        verdict_power.noise_from(path)
    assert str(path) in str(refused.value) and says in str(refused.value)


def test_the_command_line_refuses_a_missing_noise_file_naming_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "aa_noise.json"
    with pytest.raises(SystemExit) as stopped:
        verdict_power.main(["--noise-from", str(missing)])
    assert stopped.value.code == 2
    assert str(missing) in capsys.readouterr().err


def test_two_stage_false_calls_stay_within_alpha_at_no_drift():
    """Stein's rule judges with the first stage's spread, so choosing the rounds from the data
    keeps the false-call rate at α; judging with the final rounds' spread would exceed it."""
    order = verdict_power.abba_order(12)
    trials = 8000
    rows = verdict_power.log_speeds(order, np.random.default_rng(7).normal(0, 0.02, (trials, len(order))),
                                    0.0, 0.0, None)
    calls, used = verdict_power.two_stage_verdicts(order, rows, 0.05, 12)
    assert np.mean(calls != 0) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    assert used.min() == 6 and used.max() == 12  # at CV 2% some first stages suffice, some spend the budget
    a, b = verdict_power.split(order, rows)
    first_spread = (a - b)[:, :6].std(axis=1, ddof=1)
    assert np.all(np.diff(used[np.argsort(first_spread)]) >= 0)  # more spread first, at least as many rounds


def test_blocked_order_under_drift_calls_identical_launchers_different_and_abba_paired_does_not():
    rng = np.random.default_rng(11)
    blocked = verdict_power.false_calls(verdict_power.blocked_order(8), verdict_power.landed_calls,
                                        0.02, 0.005, 100, rng)
    paired = verdict_power.false_calls(verdict_power.abba_order(8), verdict_power.paired_calls,
                                       0.02, 0.005, 1000, rng)
    assert np.mean(blocked != 0) > 0.5
    assert np.mean(paired != 0) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / 1000)


def test_the_script_prints_the_noise_model_it_used_every_row_and_the_target(tmp_path, capsys):
    path = write(tmp_path, {"cv": 0.015, "drift_per_run": 0.001, "source": "test A/A"})
    verdict_power.main(["--noise-from", str(path), "--trials", "20", "--rounds", "6", "--max-rounds", "8"])
    out = capsys.readouterr().out
    assert f"CV 1.50% a run, drift +0.100% a run, from {path}; source: test A/A" in out
    for design in (*verdict_power.DESIGNS, verdict_power.TWO_STAGE):
        assert design in out
    target = [line for line in out.splitlines() if line.startswith(f"  {verdict_power.TWO_STAGE}: ")]
    assert len(target) == 1 and (": met:" in target[0] or ": NOT met:" in target[0])


def test_an_aa_noise_csv_gives_the_medians_of_its_rows(tmp_path):
    path = tmp_path / "aa_noise.csv"
    path.write_text("variant,launcher,runs,rounds,cv,drift_per_run\n"
                    "cpu1-bs64,local,12,6,0.01,0.001\ncpu2h-bs64,local,12,6,0.03,-0.002\ncpu2h-bs64,ssh,12,6,0.02,0.0\n"
                    "cpu1-bs64,ssh,2,1,,\n")
    cv, drift, where = verdict_power.noise_from(path)
    assert (cv, drift) == (pytest.approx(0.02), pytest.approx(0.0))
    assert "median of 3 (variant, launcher) entries, 1 with no cv or drift left out" in where
    path.write_text("variant,launcher,cv,drift_per_run\nv,local,lots,0.1\n")
    with pytest.raises(ValueError, match="cv \\(entry v/local\\) must be a finite number, got 'lots'"):
        verdict_power.noise_from(path)

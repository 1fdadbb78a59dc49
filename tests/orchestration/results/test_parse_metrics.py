"""Log parsing and metrics: old and new MXNet logs, interleaved workers, bad lines."""
import math
from pathlib import Path

import pandas as pd
import pytest

from mxbench.results.metrics import NoSpeedLines, compare_speeds, launcher_ratios, leg_order, run_metrics, summarise
from mxbench.results.parse import parse_lines, parse_log, parse_run_logs

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def test_seed_8gpu_log_with_p2p_matrix():
    parsed = parse_log(LOGS / "seed_8gpu.log")
    assert parsed.p2p["enabled_pairs"] == 24 and parsed.p2p["total_pairs"] == 56
    assert parsed.p2p["matrix"][0] == ".vvv...." and len(parsed.p2p["matrix"]) == 8
    assert parsed.unparsed == []
    metrics = run_metrics(parsed)
    assert metrics["workers"] == 1
    assert metrics["sec_per_epoch"] == pytest.approx(6.925)  # the 15.1 s first epoch is excluded
    assert metrics["first_epoch_s"] == pytest.approx(15.1)
    assert 7100 < metrics["samples_per_sec"] < 7200  # warm-up epoch (3500/s) excluded
    assert metrics["validation_accuracy"] == pytest.approx(0.64)


def test_untagged_interleaved_workers_are_summed_not_multiplied():
    parsed = parse_log(LOGS / "seed_2x4gpu_interleaved.log")
    assert parsed.workers == 2
    metrics = run_metrics(parsed)
    assert metrics["samples_per_sec"] == pytest.approx(4005.25 + 3793.15)
    assert metrics["samples_per_sec"] != pytest.approx(2 * 4005.25)
    assert metrics["sec_per_epoch"] == pytest.approx(6.6)  # the slower worker ends the epoch
    assert "Traceback-looking garbage line that no parser knows" in parsed.unparsed


def test_tagged_lines_of_mxnet_1_9():
    lines = [
        "2026-12-02 12:57:39,129 Node[1] Epoch[0] Batch [0-5]\tSpeed: 866.58 samples/sec\taccuracy=0.220000",
        "2026-12-02 12:57:39,130 Node[0] Epoch[0] Batch [0-5]\tSpeed: 800.00 samples/sec\taccuracy=0.240000",
        "2026-12-02 12:57:39,372 Node[0] Epoch[0] Time cost=0.750",
        "2026-12-02 12:57:39,372 Node[1] Epoch[0] Time cost=0.770",
        "2026-12-02 12:57:39,439 Node[1] Epoch[0] Validation-accuracy=0.150000",
    ]
    parsed = parse_lines(lines)
    assert parsed.speed[["worker", "batch", "samples_per_sec"]].values.tolist() == [[1, 5, 866.58], [0, 5, 800.0]]
    assert parsed.speed["train_accuracy"].tolist() == [0.22, 0.24]
    assert run_metrics(parsed)["sec_per_epoch"] == pytest.approx(0.77)


def test_bad_lines_never_kill_the_parser():
    lines = ["\x00\xff garbage", "Epoch[0] Batch [", "Epoch[x] Time cost=abc", ":::MXBENCH {not json",
             "Epoch[0] Batch [10]\tSpeed: nan samples/sec", "", "Epoch[0] Batch [20]\tSpeed: 12.5 samples/sec"]
    parsed = parse_lines(lines)
    assert len(parsed.speed) == 2 and math.isnan(parsed.speed["samples_per_sec"][0])
    assert parsed.unparsed == ["\x00\xff garbage", "Epoch[0] Batch [", "Epoch[x] Time cost=abc", ":::MXBENCH {not json"]


def test_log_without_speed_lines_is_a_named_error():
    with pytest.raises(NoSpeedLines, match="no_speed_lines.log has no Speedometer lines"):
        run_metrics(parse_log(LOGS / "no_speed_lines.log"), "no_speed_lines.log")


def test_per_rank_files_attribute_untagged_lines_to_their_rank(tmp_path):
    (tmp_path / "rank0.log").write_text("Epoch[0] Batch [5]\tSpeed: 100 samples/sec\n")
    (tmp_path / "rank1.log").write_text("Epoch[0] Batch [5]\tSpeed: 90 samples/sec\n")
    parsed = parse_run_logs(sorted(tmp_path.glob("rank*.log")))
    assert parsed.speed["worker"].tolist() == [0, 1] and run_metrics(parsed)["samples_per_sec"] == 190


def runs_table(rows):
    base = {"setup": "s", "num_layers": 8, "batch_size": 32, "batch_per_device": 32, "status": "ok",
            "sec_per_epoch": 1.0, "gpu_util_pct": None, "gpu_mem_mib": None, "validation_accuracy": 0.5}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_summary_scaling_efficiency_against_the_one_device_baseline():
    runs = runs_table([
        {"variant": "one", "launcher": "ssh", "devices": 1, "samples_per_sec": s} for s in (100, 110, 90)] + [
        {"variant": "four", "launcher": "ssh", "devices": 4, "samples_per_sec": s} for s in (360, 380, 340)] + [
        {"variant": "four", "launcher": "ssh", "devices": 4, "samples_per_sec": None, "status": "failed"}])
    summary = summarise(runs).set_index("variant")
    assert summary.loc["four", "samples_per_sec"] == 360 and summary.loc["four", "speedup"] == pytest.approx(3.6)
    assert summary.loc["four", "scaling_efficiency"] == pytest.approx(0.9)
    assert summary.loc["four", "runs_ok"] == 3 and summary.loc["four", "runs_failed"] == 1
    assert (summary.loc["four", "samples_per_sec_min"] == 340
            and summary.loc["one", "samples_per_sec_cv"] == pytest.approx(0.1))


def test_launcher_ratio_carries_the_verdict_statistics():
    runs = runs_table(
        [{"variant": "v", "launcher": "ssh", "devices": 8, "samples_per_sec": s} for s in (8010, 8000, 8020, 7990)]
        + [{"variant": "v", "launcher": "kubernetes", "devices": 8, "samples_per_sec": s}
           for s in (7586, 7600, 7570, 7590)])
    (row,) = launcher_ratios(runs).to_dict("records")
    assert row["launcher"] == "kubernetes" and row["reference"] == "ssh"
    assert row["ratio"] == pytest.approx(7588 / 8005) and row["ci_low"] < row["ratio"] < row["ci_high"] < 1
    assert row["p_value"] == pytest.approx(2 / 70) and row["n"] == 4 and row["n_reference"] == 4
    assert row["outcome"] == "slower" and "not explained by noise (p = 0.029 < α = 0.05)" in row["verdict"]
    noisy = compare_speeds(pd.Series([7600.0, 8100, 7900, 8000]), pd.Series([8010.0, 7700, 8200, 7900]))
    assert noisy["outcome"] == "can't tell" and "would have been detected" in noisy["verdict"]
    assert compare_speeds(pd.Series([1.0]), pd.Series([2.0]))["outcome"] == "too few repeats"


def test_each_launcher_is_compared_with_every_simpler_one():
    from mxbench.results.metrics import launcher_pairs

    assert launcher_pairs(["ssh", "local"]) == [("ssh", "local")]
    assert launcher_pairs(["kubernetes", "ssh", "local"]) == [("ssh", "local"), ("kubernetes", "local"),
                                                             ("kubernetes", "ssh")]
    assert launcher_pairs(["local"]) == []


def rounds_table(order, speeds, status=None, seconds=10):
    """Runs of variant v back to back, in time order ``order`` ((launcher, repeat) each)."""
    status = status or {}
    return runs_table([{"variant": "v", "launcher": launcher, "repeat": r, "devices": 1,
                        "started_at": i * seconds, "ended_at": (i + 1) * seconds - 1,
                        "status": status.get((launcher, r), "ok"),
                        "samples_per_sec": None if status.get((launcher, r)) else speeds[launcher] + i}
                       for i, (launcher, r) in enumerate(order)])


ABBA = [("ssh", 1), ("kubernetes", 1), ("kubernetes", 2), ("ssh", 2), ("kubernetes", 3), ("ssh", 3),
        ("ssh", 4), ("kubernetes", 4), ("ssh", 5), ("kubernetes", 5), ("kubernetes", 6), ("ssh", 6)]
SPEEDS = {"ssh": 8000.0, "kubernetes": 7600.0}


def test_runs_in_rounds_are_analysed_as_pairs_and_the_table_says_so():
    (row,) = launcher_ratios(rounds_table(ABBA, SPEEDS)).to_dict("records")
    assert row["analysis"] == "paired, 6 rounds, t test (normality check passed)"
    assert row["n"] == 6 and row["n_reference"] == 6
    assert row["outcome"] == "slower" and row["p_value"] < 1e-6
    assert "6 rounds paired: slower" in row["verdict"]
    assert row["order"] == ("interleaved, counterbalanced (ssh r1, kubernetes r1, kubernetes r2, ssh r2, "
                            "kubernetes r3, ssh r3, …)")


@pytest.mark.parametrize("change, why", [
    ({"status": {("ssh", 3): "failed"}}, "unpaired: a run failed (ssh r3), so its round has no pair"),
    ({"order": [(launcher, r) for launcher in ("ssh", "kubernetes") for r in range(1, 7)]},
     "unpaired: the two runs of a round were not back to back"),
    ({"order": ABBA[:-1] + [("ssh", 7)]}, "unpaired: a round without exactly one run of each of kubernetes and ssh"),
    ({"seconds": -5}, "unpaired: runs overlapped in time"),
])
def test_runs_not_paired_in_time_fall_back_to_the_unpaired_rule_and_say_why(change, why):
    table = rounds_table(change.get("order", ABBA), SPEEDS, change.get("status"), 10)
    if change.get("seconds"):  # every run ends 5 s after the next one starts
        table["ended_at"] = table["started_at"] + 15
    (row,) = launcher_ratios(table).to_dict("records")
    assert row["analysis"] == why
    assert "repeats" in row["verdict"] and "rounds paired" not in row["verdict"]


def test_fewer_rounds_than_the_paired_test_needs_are_compared_unpaired():
    (row,) = launcher_ratios(rounds_table(ABBA[:8], SPEEDS)).to_dict("records")
    assert row["analysis"] == "unpaired: 4 rounds, fewer than the 6 a paired test needs"
    assert row["outcome"] == "slower" and "4 vs 4 repeats" in row["verdict"]
    assert leg_order(rounds_table(ABBA[:8], SPEEDS), "kubernetes", "ssh").startswith("interleaved, counterbalanced")


def test_runs_without_start_times_are_compared_unpaired():
    table = rounds_table(ABBA, SPEEDS).drop(columns=["started_at", "ended_at"])
    (row,) = launcher_ratios(table).to_dict("records")
    assert row["analysis"] == "unpaired: no start times to pair the runs by" and row["n"] == 6

"""The mxbench command line: `parse --json` contract, on old logs and on real training logs."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_trainer

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
MXBENCH = str(Path(sys.executable).with_name("mxbench"))


def mxbench(*args):
    return subprocess.run([MXBENCH, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_parse_json_contract_on_a_2016_log():
    done = mxbench("parse", "--json", LOGS / "seed_8gpu.log", LOGS / "seed_2x4gpu_interleaved.log")
    assert done.returncode == 0, done.stderr
    eight, two = json.loads(done.stdout)
    for result in (eight, two):
        assert isinstance(result["workers"], int) and isinstance(result["samples_per_sec"], float)
        assert isinstance(result["sec_per_epoch"], float) and isinstance(result["unparsed_lines"], list)
        assert [set(e) for e in result["epochs"]] == [
            {"epoch", "time_cost_s", "train_accuracy", "validation_accuracy"}] * 3
    assert eight["p2p"] == {"enabled_pairs": 24, "total_pairs": 56, "matrix": [
        ".vvv....", "v.vv....", "vv.v....", "vvv.....", ".....vvv", "....v.vv", "....vv.v", "....vvv."]}
    assert two["p2p"] is None and two["workers"] == 2
    assert two["samples_per_sec"] == pytest.approx(7798.4)


def test_parse_json_on_a_real_training_log(cifar_rec, tmp_path):
    done = run_trainer("train", "--num-layers", 8, "--kv-store", "local", "--batch-size", 50, "--disp-batches", 4,
                       "--num-epochs", 2, "--data-train", cifar_rec / "cifar10_train.rec",
                       "--data-val", cifar_rec / "cifar10_val.rec")
    assert done.returncode == 0, done.stderr[-2000:]
    log = tmp_path / "train.log"
    log.write_text(done.stdout + done.stderr)  # as a user would capture it: both streams
    (result,) = json.loads(mxbench("parse", "--json", log).stdout)
    readings = [float(line.split("Speed: ")[1].split()[0]) for line in done.stdout.splitlines()
                if "Epoch[1] Batch" in line and "Speed:" in line]
    assert result["samples_per_sec"] == pytest.approx(statistics.median(readings))
    assert [e["epoch"] for e in result["epochs"]] == [0, 1]
    assert all(0 <= e["validation_accuracy"] <= 1 for e in result["epochs"])
    assert result["workers"] == 1


def test_parse_names_a_log_without_speed_lines_and_goes_on():
    done = mxbench("parse", "--json", LOGS / "no_speed_lines.log", LOGS / "seed_8gpu.log")
    assert done.returncode == 1
    bad, good = json.loads(done.stdout)
    assert bad["samples_per_sec"] is None and "no Speedometer lines" in bad["error"]
    assert good["samples_per_sec"] > 7000
    assert f"error: {LOGS / 'no_speed_lines.log'} has no Speedometer lines" in done.stderr


def write_runs(folder: Path, speeds: dict):
    (folder / "tables").mkdir(parents=True)
    rows = [{"key": f"{v}__{launcher}__r{i}", "variant": v, "launcher": launcher, "status": "ok",
             "samples_per_sec": s}
            for (v, launcher), values in speeds.items() for i, s in enumerate(values, 1)]
    pd.DataFrame(rows).to_csv(folder / "tables" / "runs.csv", index=False)


def test_compare_two_launchers_and_two_runs(tmp_path):
    write_runs(tmp_path / "a", {("v1", "ssh"): [8010, 8000, 8020, 7990, 8030],
                                ("v1", "kubernetes"): [7586, 7600, 7570, 7590, 7580]})
    done = mxbench("compare", tmp_path / "a", "--launchers", "kubernetes", "ssh")
    assert done.returncode == 0, done.stderr
    assert "v1: kubernetes at 94.7% of ssh, 95% CI [" in done.stdout
    assert "5 vs 5 repeats: slower, not explained by noise (p = 0.008 < α = 0.05)" in done.stdout
    write_runs(tmp_path / "b", {("v1", "ssh"): [8100, 8000, 8050, 7950, 8020]})
    done = mxbench("compare", tmp_path / "a", tmp_path / "b")
    assert done.returncode == 0 and "b at " in done.stdout and "of a" in done.stdout
    assert "within the band (p = " in done.stdout and "inside the ±5% target band [95%, 105%]" in done.stdout
    done = mxbench("compare", tmp_path / "a", tmp_path / "b", "--target-gap", "0.001")
    assert "can't tell (p = " in done.stdout and "would have been detected" in done.stdout
    assert "runs past the ±0.1% target band [99.9%, 100.1%]" in done.stdout
    refused = mxbench("compare", tmp_path / "a", tmp_path / "b", "--target-gap", "1.5")
    assert refused.returncode == 2 and "must lie between 0 and 1" in refused.stderr


def test_scaling_prints_the_fit_projections_hold_out_and_cost(tmp_path, capsys, monkeypatch):
    from mxbench import cli
    from support.stored_runs import make_dag_dir, variant

    monkeypatch.setenv("MXBENCH_PRICES", '{"local": {"per_machine_hour": 1.2, "currency": "USD"}}')
    speeds = {1: (100.0, 101.0), 2: (180.0, 182.0), 4: (300.0, 303.0)}
    folder = make_dag_dir(tmp_path, "run", [(variant(f"cpu{n}w-bs32", workers=n), "local", r, "ok", s, None)
                                            for n in speeds for r, s in enumerate(speeds[n], 1)])
    assert cli.main(["scaling", str(folder), "--throughput", "400"]) == 0
    out = capsys.readouterr().out
    assert "predicted from the others" in out and "PROJECTED" in out and "prediction interval" in out
    assert "the cheapest size reaching 400 samples/s is" in out and "USD" in out
    assert "this DAG run's cost" in out
    monkeypatch.delenv("MXBENCH_PRICES")
    assert cli.main(["scaling", str(folder)]) == 0
    assert "not set" in capsys.readouterr().out


def test_scaling_from_the_store_fits_every_stored_dag_run_and_refuses_two_machines(tmp_path, capsys, monkeypatch):
    from mxbench import cli
    from support.stored_runs import CPU_FP, OTHER_CPU_BOX, OTHER_FP, record_scaling_series

    monkeypatch.delenv("MXBENCH_PRICES", raising=False)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    record_scaling_series(url, tmp_path, dag_runs=3)
    assert cli.main(["scaling", "--store", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "3 DAG runs of mxbench_benchmark, 2026-01-01 to 2026-01-03, 18 measured repeats" in out
    assert f"machine cpu: AMD EPYC 7B13 x2 [{CPU_FP}]" in out and "MXNet build 1.9.1" in out
    assert "predicted from the others" in out and "PROJECTED" in out and "not set" in out
    assert cli.main(["scaling", "--store", "--url", url, "--since", "2026-01-02"]) == 0
    assert "2 DAG runs of mxbench_benchmark" in capsys.readouterr().out

    record_scaling_series(url, tmp_path, dag_runs=1, environment=OTHER_CPU_BOX, first=3)
    assert cli.main(["scaling", "--store", "--url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the stored runs measured 2 kinds of machine:") and CPU_FP in err and OTHER_FP in err
    assert cli.main(["scaling", "--store", "--url", url, "--fingerprint", CPU_FP]) == 0
    assert "3 DAG runs" in capsys.readouterr().out
    assert cli.main(["scaling", "--store", "--url", url, "--dag-id", "mxbench_regression"]) == 1
    assert "no measured runs stored" in capsys.readouterr().err
    assert cli.main(["scaling"]) == 2


def scaling_folder(tmp_path):
    from support.stored_runs import make_dag_dir, variant

    speeds = {1: (100.0, 101.0), 2: (180.0, 182.0), 4: (300.0, 303.0)}
    return make_dag_dir(tmp_path, "run", [(variant(f"cpu{n}w-bs32", workers=n), "local", r, "ok", s, None)
                                          for n in speeds for r, s in enumerate(speeds[n], 1)])


@pytest.mark.parametrize("option, value, cause", [
    ("--seed", "-1", "must be a whole number 0 or more"),
    ("--seed", "1.5", "must be a whole number 0 or more"),
    ("--throughput", "-5", "must be a number above 0"),
    ("--throughput", "0", "must be a number above 0"),
    ("--throughput", "inf", "must be a number above 0"),
    ("--throughput", "nan", "must be a number above 0"),
])
def test_scaling_refuses_a_bad_seed_or_throughput_in_one_line(tmp_path, option, value, cause):
    done = mxbench("scaling", scaling_folder(tmp_path), option, value)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"argument {option}: {value!r} {cause}" in done.stderr


def test_scaling_says_what_is_wrong_with_deeply_nested_json_prices_or_records(tmp_path, monkeypatch):
    folder = scaling_folder(tmp_path)
    nested = "[" * 50_000 + "]" * 50_000  # past the JSON parser's recursion limit
    done = subprocess.run([MXBENCH, "scaling", str(folder)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "MXBENCH_PRICES": nested})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "MXBENCH_PRICES must be a JSON object" in done.stdout and "nested too deeply" in done.stdout
    (folder / "request.json").write_text(nested)  # a record nested too deeply reads as unreadable
    done = mxbench("scaling", folder)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("command", [["scaling", "--store"], ["history", "cpu2-bs32"]])
def test_reading_a_store_at_a_mistyped_url_creates_nothing(tmp_path, command):
    typo = tmp_path / "no such folder" / "resutls.db"
    done = mxbench(*command, "--url", f"sqlite:///{typo}")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: no ")
    assert not typo.exists() and not typo.parent.exists()

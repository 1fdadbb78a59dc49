"""MXNet's C++ notices reach the report: a trainer that really writes the P2P notice to its
stderr, through the local launcher, parse, join and report (real tiny training, 1 epoch)."""
import json

import pandas as pd

from conftest import REPO, train_python
from mxbench.run_folder import DagRunFolder

P2P_PYTHON = REPO / "tests" / "fixtures" / "bin" / "python-p2p-notice"


def test_p2p_notice_on_a_roles_stderr_reaches_the_runs_table_and_the_report(cifar_rec, tmp_path, monkeypatch):
    from mxbench import run_folder
    from mxbench.matrix.variants import Target
    from mxbench.report import build_report
    from mxbench.stages import pipeline, run_stage

    monkeypatch.setenv("MXBENCH_REAL_TRAIN_PYTHON", train_python())  # before train_python() means the wrapper
    monkeypatch.setenv("MXBENCH_TRAIN_PYTHON", str(P2P_PYTHON))
    params = {"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"], "epochs": 1}
    (run,) = pipeline.expand(params, DagRunFolder(tmp_path), {"local": Target("local", 1, 0)})
    data = {"dir": str(cifar_rec), "records": {"train": 1000}}
    run_folder.write_json(tmp_path / "data.json", data)
    assert run_stage.run_one(run, DagRunFolder(tmp_path), data, deadline_s=300)["status"] == "ok"
    role_log = (tmp_path / run["key"] / "roles" / "worker-0.log").read_text()
    rank_log = (tmp_path / run["key"] / "rank0.log").read_text()
    assert "only 24 out of 56 GPU pairs" in role_log and "GPU pairs" not in rank_log  # stderr only

    pipeline.parse_all(DagRunFolder(tmp_path))
    pipeline.join(DagRunFolder(tmp_path))
    build_report(DagRunFolder(tmp_path))
    row = pd.read_csv(tmp_path / "tables" / "runs.csv").iloc[0]
    assert row["status"] == "ok" and row["p2p_pairs"] == "24/56"
    metrics = json.loads((tmp_path / run["key"] / "metrics.json").read_text())
    assert metrics["p2p"]["matrix"][:2] == [".vvv....", "v.vv...."] and len(metrics["p2p"]["matrix"]) == 8
    notices = json.loads((tmp_path / run["key"] / "notices.json").read_text())
    assert any("storage.cc:199: Using Pooled (Naive) StorageManager" in n for n in notices)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| cpu1-bs32 | local | 24/56 |" in md
    assert "only 24 out of 56 GPU pairs are enabled direct access" in md
    assert "StorageManager" not in md  # routine notices stay in metrics.json, out of the report
    # one epoch: the report says its figures include warm-up instead of claiming it excluded it
    assert "| cpu1-bs32 | local | 1 epoch: its figures include warm-up" in md
    # the second throughput stands beside the Speedometer's
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv").iloc[0]
    assert summary["epoch_samples_per_sec"] > 0 and summary["samples_per_sec"] > 0

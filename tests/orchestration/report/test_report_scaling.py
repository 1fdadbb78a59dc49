"""The report's scaling model section: with three or more sizes measured, the fitted terms, the measured
and PROJECTED sizes (labelled as such), the hold-out line and the plot; with fewer, none of it.
Costs only from the deployer's prices, "not set" otherwise."""
import json

from mxbench import report
from mxbench.report import scaling_tables
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from support.stored_runs import make_dag_dir, variant

SPEEDS = {1: (100.0, 102.0, 99.0), 2: (180.0, 183.0, 178.0), 4: (300.0, 305.0, 296.0)}  # CPU workers


def cpu_runs(sizes=(1, 2, 4)):
    return [(variant(f"cpu{n}w-bs32", workers=n), "local", r, "ok", speed, None)
            for n in sizes for r, speed in enumerate(SPEEDS[n], 1)]


def built(tmp_path, sizes=(1, 2, 4)):
    folder = make_dag_dir(tmp_path, "run", cpu_runs(sizes))
    pipeline.join(DagRunFolder(folder))
    report.build_report(DagRunFolder(folder))
    return folder, (folder / "report" / "report.md").read_text()


def test_three_sizes_give_the_model_its_projections_labelled_and_its_plot(tmp_path, monkeypatch):
    monkeypatch.delenv("MXBENCH_PRICES", raising=False)
    folder, md = built(tmp_path)
    assert "## Scaling model: terms of the step time" in md
    assert "| PROJECTED |" in md and "8 CPU workers on 2 machines" in md and "16 CPU workers on 4 machines" in md
    assert "predicted from the others" in md and "prediction interval" in md
    assert "CPU workers share this host's cores" in md
    assert "scaling_fit.png" in md and (folder / "report" / "scaling_fit.png").exists()
    assert "No prices set (MXBENCH_PRICES): every cost is not set" in md
    assert "not set" in md.split("## Scaling model: measured sizes and PROJECTED ones")[1]
    html = (folder / "report" / "report.html").read_text()
    assert "PROJECTED" in html


def test_fewer_than_three_sizes_give_no_model(tmp_path, monkeypatch):
    monkeypatch.delenv("MXBENCH_PRICES", raising=False)
    folder, md = built(tmp_path, sizes=(1, 2))
    assert "Scaling model" not in md and not (folder / "report" / "scaling_fit.png").exists()


def test_costs_come_from_the_deployers_prices_only(tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_PRICES", json.dumps({"local": {"per_device_hour": 3.6, "currency": "EUR"}}))
    folder, md = built(tmp_path)
    # 9 runs of 50 s: 1, 2 and 4 devices, 3 runs each -> 3 x 50 x 7 device-seconds = 1050 s = 0.292 h
    assert "0.292" in md and "1.05 EUR" in md  # 0.2917 device-hours at 3.6 EUR
    runs = __import__("pandas").read_csv(folder / "tables" / "runs.csv")
    request = json.loads((folder / "request.json").read_text())
    found = scaling_tables.models(runs, request)
    (line,) = scaling_tables.cheapest_line(found, {"local": {"per_hour": 3.6, "unit": "device", "currency": "EUR"}},
                                           wanted=500)
    assert "8 CPU workers on 2 machines (PROJECTED)" in line or "16 CPU workers on 4 machines (PROJECTED)" in line
    assert "no price set" in scaling_tables.cheapest_line(found, {}, wanted=500)[0]


def test_a_malformed_price_setting_is_said_not_guessed(tmp_path, monkeypatch):
    from mxbench import config

    monkeypatch.setenv("MXBENCH_PRICES", json.dumps({"local": {"per_hour": 3}}))  # no unit: refused
    folder, md = built(tmp_path)
    assert "Costs not shown: MXBENCH_PRICES must be" in md
    monkeypatch.setenv("MXBENCH_PRICES", json.dumps({"ssh": {"per_machine_hour": 12, "currency": "EUR"}}))
    assert config.prices() == {"ssh": {"per_hour": 12.0, "unit": "machine", "currency": "EUR"}}

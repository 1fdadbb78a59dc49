"""The builds view (report.builds_view) over a seeded store: three builds, a real 20% step at the
second, none at the third; contended repeats left out and counted; machines by name; and the same
view from the command line (``mxbench builds``)."""
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from mxbench import cli, store
from mxbench.builds.mxnet_builds import load_manifest
from mxbench.regression.regression_rule import MIN_DROP
from mxbench.report.builds_view import builds_lines, builds_table, builds_view
from mxbench.run_folder import DagRunFolder
from mxbench.stats.verdict import compare
from support.stored_runs import CPU_BOX, CPU_FP, T0, make_dag_dir, ok_runs

# the manifest's builds of docs/results-store.md's backfill: what each night asked for and what its trainer reported
BUILDS = [("mxnet==1.8.0.post0", "1.8.0", 100.0), ("mxnet==1.9.0", "1.9.0", 80.0), ("mxnet==1.9.1", "1.9.1", 80.0)]
NIGHTS_PER_BUILD = 2
REPEATS = 6


def seeded_speeds(rng, level):
    return [float(level * np.exp(rng.normal(0, 0.01))) for _ in range(REPEATS)]


@pytest.fixture
def backfilled(tmp_path):
    """Six nights, two per build, recorded as the regression DAG's backfill records them; on the
    second night of 1.9.0 two repeats ran beside other work and read 40% slow."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    rng = np.random.default_rng(7)
    night, speeds_of = 0, {}
    for package, reported, level in BUILDS:
        for _ in range(NIGHTS_PER_BUILD):
            speeds = seeded_speeds(rng, level)
            contended = night == 3
            if contended:
                speeds[:2] = [level * 0.6, level * 0.6]
            run_id = f"backfill__2026-11-{night + 1:02d}T00:00:00+00:00"
            folder = make_dag_dir(tmp_path, f"night{night}", ok_runs(speeds=speeds), started=T0 + timedelta(days=night),
                                  ran={"local": {"mxnet_asked": package, "mxnet_reported": reported,
                                                 "runtime": "/venvs/x/bin/python"}}, run_id=run_id)
            if contended:
                table = pd.read_csv(folder / "tables" / "runs.csv")
                table["contended"] = [True, True] + [False] * (REPEATS - 2)
                table.to_csv(folder / "tables" / "runs.csv", index=False)
            night_start = T0 + timedelta(days=night)
            store.record_dag_run(url, DagRunFolder(folder), dag_id="mxbench_regression", run_id=run_id,
                                 trigger="backfill",
                                 build={"package": package}, logical_date=night_start,
                                 data_interval=(night_start, night_start + timedelta(days=1)))
            speeds_of.setdefault(reported, []).extend(s for i, s in enumerate(speeds) if not (contended and i < 2))
            night += 1
    return url, speeds_of


def test_the_view_names_each_build_its_speed_and_the_step_backed_by_the_verdict(backfilled):
    url, speeds_of = backfilled
    view = builds_view(store.history(url, "cpu2-bs32"), load_manifest(), store.machine_names(url))
    assert list(view["build"]) == ["1.8.0", "1.9.0", "1.9.1"]  # in manifest order
    assert list(view["since"]) == ["2026-10-15", "2026-11-04", "2026-11-08"]
    assert [len(runs) for runs in view["dag_runs"]] == [2, 2, 2]
    first, step, flat = view.to_dict("records")
    assert first["low"] < first["samples_per_sec"] < first["high"] and 95 < first["samples_per_sec"] < 105
    # the step: -20% with an interval, and the label is the verdict function's own
    expected = compare(speeds_of["1.9.0"], speeds_of["1.8.0"], target_gap=MIN_DROP)
    assert step["outcome"] == expected.outcome == "slower"
    assert step["change"] == pytest.approx(expected.ratio - 1) and -0.22 < step["change"] < -0.18
    assert step["change_low"] < step["change"] < step["change_high"] < 0
    assert step["previous_build"] == "1.8.0"
    # no change at the third build: whatever the verdict calls an equivalence, not a difference
    no_change = compare(speeds_of["1.9.1"], speeds_of["1.9.0"], target_gap=MIN_DROP)  # the band the view judges by
    assert flat["outcome"] == no_change.outcome and flat["outcome"] not in ("slower", "faster")
    assert flat["change_low"] < 0 < flat["change_high"]
    # the contended repeats: left out of 1.9.0's numbers and counted
    assert (step["contended"], step["repeats"]) == (2, 2 * REPEATS - 2)
    assert first["contended"] == flat["contended"] == 0
    # the step finder's level change starts at 1.9.0's first DAG run
    assert step["level_change"] == pytest.approx(-0.2, abs=0.03)
    assert pd.isna(first["level_change"]) and pd.isna(flat["level_change"])
    # the machine by name, its fingerprint kept
    assert set(view["machine"]) == {store.fingerprint(CPU_BOX)[1]["host_class"]} == {"cpu: AMD EPYC 7B13 x2"}
    assert set(view["fingerprint"]) == {CPU_FP}


def test_the_table_links_each_dag_run_and_a_bisect_over_the_builds_between(backfilled):
    url, _ = backfilled
    manifest = load_manifest()
    view = builds_view(store.history(url, "cpu2-bs32"), manifest, store.machine_names(url))
    table = builds_table(view)
    step = table.iloc[1]
    assert step["MXNet build"] == "1.9.0 (since 2026-11-04)"
    assert "-20" in step["change [95% CI], verdict"] or "-19" in step["change [95% CI], verdict"]
    assert step["change [95% CI], verdict"].endswith(", slower")
    links = step["DAG runs"]
    assert [href for _, href in links.anchors] == [
        "../../report/mxbench_regression/backfill__2026-11-03T00%3A00%3A00%2B00%3A00",
        "../../report/mxbench_regression/backfill__2026-11-04T00%3A00%3A00%2B00%3A00"]
    assert str(step["machine"]) == f"cpu: AMD EPYC 7B13 x2 [{CPU_FP}]"
    assert step["machine"].html() == f"<abbr title='{CPU_FP}'>cpu: AMD EPYC 7B13 x2</abbr>"
    # 1.8.0 -> 1.9.0 are neighbours in the manifest: nothing to bisect; a view over 1.6.0 -> 1.9.0 has
    assert step["bisect (trigger mxbench_bisect with this conf)"] == ""
    history = store.history(url, "cpu2-bs32")
    history.loc[history["build"] == "1.8.0", ["mxnet_asked", "build"]] = ["mxnet==1.6.0", "1.6.0"]
    wide = builds_table(builds_view(history, manifest, {}))
    conf = wide.iloc[1]["bisect (trigger mxbench_bisect with this conf)"]
    assert '"bad_build": "2026-11-04"' in conf.plain and '"good_build": "2026-09-01"' in conf.plain
    assert conf.anchors[0][1] == "../../../dags/mxbench_bisect"


def test_a_build_with_no_quiet_repeat_says_so_and_stays_the_next_ones_previous(backfilled):
    url, _ = backfilled
    history = store.history(url, "cpu2-bs32")
    history.loc[history["build"] == "1.9.0", "contended"] = True  # every repeat beside other work
    view = builds_table(builds_view(history, load_manifest(), {}))
    assert list(view["samples/s [95% CI]"])[1] == "n/a (no quiet repeat)"
    assert list(view["change [95% CI], verdict"])[1:] == ["from 1.8.0: n/a (no quiet repeat)",
                                                          "from 1.9.0: n/a (no quiet repeat)"]
    assert list(view["contended repeats left out"]) == [0, 2 * REPEATS, 0]


def test_without_the_manifest_builds_go_in_the_order_they_were_first_measured(backfilled):
    url, _ = backfilled
    view = builds_view(store.history(url, "cpu2-bs32"))
    assert list(view["build"]) == ["1.8.0", "1.9.0", "1.9.1"]
    assert list(view["machine"]) == [CPU_FP] * 3  # no names given: the fingerprint


def test_mxbench_builds_prints_the_view(backfilled, capsys):
    url, _ = backfilled
    assert cli.main(["builds", "cpu2-bs32", "--url", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("cpu2-bs32 (local) on cpu: AMD EPYC 7B13 x2 [")
    first, step, flat = [line for line in lines if line.startswith("  ") and not line.startswith("    ")]
    assert first.startswith("  1.8.0 (since 2026-10-15): ") and "first build" in first
    assert step.startswith("  1.9.0 (since 2026-11-04): ") and "from 1.8.0: -" in step
    assert ", slower; 2 contended repeat(s) left out; level change starts here" in step
    assert flat.startswith("  1.9.1 (since 2026-11-08): ") and "from 1.9.0: " in flat
    assert lines[lines.index(step) + 1] == ("    DAG runs: backfill__2026-11-03T00:00:00+00:00, "
                                            "backfill__2026-11-04T00:00:00+00:00")
    assert builds_lines(builds_view(store.history(url, "cpu2-bs32"), load_manifest(),
                                    store.machine_names(url))) == lines
    assert cli.main(["builds", "no-such-variant", "--url", url]) == 1
    assert "no results for variant no-such-variant" in capsys.readouterr().err


def test_the_history_page_shows_the_builds_first_and_machines_by_name(backfilled):
    from mxbench.regression.regression_rule import judge_history
    from mxbench.report import history_page

    url, _ = backfilled
    rows = store.read_history(url)
    page = history_page(judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True))), "test",
                        names=store.machine_names(url))
    assert page.index("<h2>Builds: what each MXNet build did to speed") < page.index(
        "<h2>Throughput by variant and MXNet build")
    named = f"<abbr title='{CPU_FP}'>cpu: AMD EPYC 7B13 x2</abbr>"
    assert page.count(named) >= 3  # the builds view, the table by build, the step finder
    assert "<td>2</td>" in page.split("<h2>Builds", 1)[1].split("</table>", 1)[0]  # contended, left out

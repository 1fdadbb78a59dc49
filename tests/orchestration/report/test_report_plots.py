"""The report's plots read as a person expects: whole devices on a log2 axis, whole epochs."""
import pandas as pd
import pytest

from mxbench import report
from mxbench.report import plots


@pytest.fixture
def figures(monkeypatch):
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig))
    return kept


def test_devices_on_a_log2_axis_with_whole_device_ticks(figures, tmp_path):
    summary = pd.DataFrame({"launcher": "ssh", "num_layers": 110, "batch_per_device": 128, "devices": [1, 2, 4, 8],
                            "samples_per_sec": [100.0, 190, 370, 700], "samples_per_sec_min": [95.0, 185, 360, 690],
                            "samples_per_sec_max": [105.0, 195, 380, 710]})
    report.plot_scaling(summary, tmp_path / "scaling.png")
    (ax,) = figures[0].axes
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [1, 2, 4, 8]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]


def test_epochs_are_whole_numbers(figures, tmp_path):
    epochs = pd.DataFrame({"variant": "v", "launcher": "local", "repeat": 1, "epoch": [0, 1, 2],
                           "validation_accuracy": [0.3, 0.5, 0.6]})
    report.plot_accuracy(epochs, tmp_path / "accuracy.png")
    (ax,) = figures[0].axes
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_the_run_order_plot_rings_the_contended_runs_of_every_launcher_with_a_legend_entry(figures, tmp_path):
    """Rings read from the plot's own data, not its pixels: a contended pod's run is ringed like a
    contended ssh run; a run that could not tell (None) is not."""
    rows = []
    for r, (launchers, contended) in enumerate([(("local", "ssh", "kubernetes"), (None, False, True)),
                                                (("kubernetes", "ssh", "local"), (False, True, False))], start=1):
        for i, (launcher, flag) in enumerate(zip(launchers, contended)):
            rows.append({"variant": "v", "launcher": launcher, "repeat": r, "status": "ok",
                         "samples_per_sec": 100.0 + 10 * r + i, "started_at": 10.0 * r + i, "contended": flag})
    plots.plot_run_order(pd.DataFrame(rows), tmp_path / "run_order.png")
    (ax,) = figures[-1].axes
    (rings,) = [line for line in ax.get_lines() if line.get_gid() == "contended-rings"]
    assert list(rings.get_xdata()) == [3, 5] and list(rings.get_ydata()) == [112.0, 121.0]  # kubernetes r1, ssh r2
    assert rings.get_marker() == "o" and rings.get_markerfacecolor() == "none"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert plots.CONTENDED_LABEL in legend and {"local", "ssh", "kubernetes"} <= set(legend)

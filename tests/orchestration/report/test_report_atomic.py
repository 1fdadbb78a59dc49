"""The report's files are replaced whole: the UI page serves report.html while a report task (a
retry, ``mxbench report``) may be rebuilding it, and must never read a half-written file."""
import json
import os

import pytest

from mxbench import report
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from support.stored_runs import make_dag_dir, ok_runs, variant

# two launchers, one and two workers: every plot has something to show, and the forest plot a row
FILES = ("report.html", "report.md", "summary.csv", "scaling.png", "epoch_time.png", "run_order.png", "forest.svg")


def with_note(dag_dir, note):
    request = json.loads((dag_dir / "request.json").read_text())
    request["params"]["notes"] = [note]
    (dag_dir / "request.json").write_text(json.dumps(request))


@pytest.fixture
def dag_dir(tmp_path):
    folder = make_dag_dir(tmp_path, "run1", ok_runs(launchers=("local", "ssh"))
                          + ok_runs(v=variant("cpu1-bs32", workers=1), launchers=("local", "ssh")))
    pipeline.join(DagRunFolder(folder))
    with_note(folder, "first build")
    report.build_report(DagRunFolder(folder))
    return folder


def test_a_reader_of_the_old_files_keeps_them_whole_while_they_are_rebuilt(dag_dir):
    out = dag_dir / "report"
    # a reader that opened each file before the rebuild: written in place, it would see the new
    # bytes or a truncated file; replaced by a rename, it keeps reading the old file to its end
    readers = {name: open(out / name, "rb") for name in FILES}
    before = {name: (out / name).read_bytes() for name in FILES}
    inodes = {name: os.stat(out / name).st_ino for name in FILES}
    try:
        with_note(dag_dir, "second build, with a different note")
        report.build_report(DagRunFolder(dag_dir))
        for name, reader in readers.items():
            assert reader.read() == before[name], name
            assert os.stat(out / name).st_ino != inodes[name], f"{name} was written in place"
    finally:
        for reader in readers.values():
            reader.close()
    assert "second build" in (out / "report.html").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)  # no temporary file left behind


def test_a_rebuild_that_fails_midway_leaves_the_old_page(dag_dir, monkeypatch):
    page = (dag_dir / "report" / "report.html").read_text()

    def half_written(tmp):
        tmp.write_text(page[: len(page) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(report, "render_page", lambda *args, **kwargs: "<html>new</html>")
    real = report.write_atomically
    monkeypatch.setattr(report, "write_atomically", lambda path, write: real(
        path, half_written if path.name == "report.html" else write))
    with pytest.raises(OSError, match="disk full"):
        report.build_report(DagRunFolder(dag_dir))
    assert (dag_dir / "report" / "report.html").read_text() == page  # the whole old page, still served
    assert not list((dag_dir / "report").glob(".*.tmp"))

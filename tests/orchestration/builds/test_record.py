"""builds.record.RunBuild: the one shape of a build the DAG hands around, through XCom and back."""
import datetime as dt
import json

from mxbench.builds.mxnet_builds import Build
from mxbench.builds.record import RunBuild


def test_a_manifest_entry_becomes_a_record_that_survives_json():
    entry = Build(dt.date(2026, 1, 1), "mxnet==1.9.1", "registry.example/mxnet:191", commit="c" * 40)
    build = RunBuild.of(entry, ["mxnet==1.9.1", "numpy<1.24"], python="/envs/191/bin/python")
    record = build.to_dict()
    assert record == {"package": "mxnet==1.9.1", "version": "1.9.1", "spec": ["mxnet==1.9.1", "numpy<1.24"],
                      "python": "/envs/191/bin/python", "image": "registry.example/mxnet:191", "commit": "c" * 40,
                      "since": "2026-01-01", "unsupported": None}  # no label: that is the bisect DAG's
    assert RunBuild.from_dict(json.loads(json.dumps(record))) == build
    probe = RunBuild.of(entry, label="1.9.1+cccccccccc")
    assert probe.to_dict()["label"] == "1.9.1+cccccccccc" and RunBuild.from_dict(probe.to_dict()) == probe


def test_a_record_without_a_package_is_no_build():
    assert RunBuild.from_dict(None) is None and RunBuild.from_dict({"python": "/x"}) is None
    # an older record (a run expanded before records had every field) reads with the rest unset
    assert RunBuild.from_dict({"package": "mxnet==1.9.0", "spec": None}) == RunBuild("mxnet==1.9.0", "")

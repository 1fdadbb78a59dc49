"""No package spec, URL or store address is shown raw: the code paths that show a build (its record,
the manifest's errors, the DAG tasks that resolve it, the trainer's venv maker) run here with a wheel
URL that carries ``bob:s3cret@``, and what they print, raise or return for display never holds it.
A static check pins that no f-string in the library puts a package, pin, requirement or spec in
raw (``mxbench_train.redaction.redact`` goes around it)."""
import ast
import datetime as dt
import json
from types import SimpleNamespace

import pytest

from conftest import REPO
from mxbench.builds import mxnet_builds
from mxbench.builds.mxnet_builds import Build, ManifestError
from mxbench.builds.record import RunBuild
from mxbench_train import host_build
from mxbench_train.errors import MxbenchError

SECRET = "s3cret"
WHEEL = f"mxnet @ https://bob:{SECRET}@wheels.example/mxnet-1.9.1-py3-none-any.whl#sha256={'ab' * 32}"
UNHASHED = f"mxnet @ http://bob:{SECRET}@wheels.example/mxnet-1.9.1-py3-none-any.whl"


def entry(since="2026-01-01", package=WHEEL):
    return Build(dt.date.fromisoformat(since), package, "registry.example/mxnet:191")


def write(tmp_path, entries):
    path = tmp_path / "builds.json"
    path.write_text(json.dumps(entries))
    return path


def test_a_build_shown_has_no_credentials():
    assert SECRET not in str(entry()) and str(entry()).startswith("mxnet @ https://wheels.example/")
    record = RunBuild.of(entry(), [WHEEL, "numpy<1.24"])
    assert SECRET not in str(record) and str(record).startswith("MXNet build mxnet @ https://wheels.example/")
    assert SECRET not in str(RunBuild.from_dict(record.to_dict()))
    assert record.to_dict()["package"] == WHEEL  # what pip installs keeps them: only what is shown loses them


@pytest.mark.parametrize("entries", [
    [{"since": "2026-02-01", "package": WHEEL, "image": "i"},  # out of order
     {"since": "2026-01-01", "package": UNHASHED + "#sha256=" + "ab" * 32, "image": "i"}],
    [{"since": "2026-01-01", "package": f"mxnet-?? @ https://bob:{SECRET}@wheels.example/x.whl", "image": "i"}],
    [{"since": "2026-01-01", "package": "mxnet==1.9.1", "image": "i",
      "pins": [f"@ https://bob:{SECRET}@w.example/n.whl"]}],
    [{"since": "2026-01-01", "package": UNHASHED, "image": "i"}],
    [{"since": "2026-01-01", "package": WHEEL, "image": "i", "sha256": "cd" * 32}],
])
def test_the_manifests_errors_name_a_build_without_its_credentials(tmp_path, entries):
    with pytest.raises((ManifestError, ValueError)) as raised:
        mxnet_builds.load_manifest(write(tmp_path, entries))
    assert SECRET not in str(raised.value) and ".example/" in str(raised.value)  # the URL named, redacted


def test_a_date_before_the_manifest_names_its_first_build_without_credentials():
    with pytest.raises(ManifestError) as raised:
        mxnet_builds.build_for("2025-01-01", [entry()])
    assert SECRET not in str(raised.value) and "wheels.example" in str(raised.value)


def _venv_fails(build, *args, **kwargs):  # as pip might say it: the URL quoted in full
    raise MxbenchError(f"cannot make the venv: pip failed: ERROR: 401 for {build.package.split(' @ ')[1]}")


@pytest.mark.parametrize("venv", [_venv_fails, lambda build, *a, **k: "/envs/x/bin/python"])
def test_resolve_build_prints_the_build_without_credentials(monkeypatch, capsys, venv):
    from mxbench.airflow_glue import dag_tasks

    monkeypatch.setattr(mxnet_builds, "build_for", lambda when: entry())
    monkeypatch.setattr(mxnet_builds, "install_spec", lambda build: [build.package, "numpy<1.24"])
    monkeypatch.setattr(mxnet_builds, "ensure_venv", venv)
    monkeypatch.setattr(mxnet_builds, "check_trainer", lambda python: f"{UNHASHED} cannot train here")
    dag_run = SimpleNamespace(data_interval_start=dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc))
    for launchers in (["local"], ["ssh"]):
        record = dag_tasks.resolve_build.function(params={"launchers": launchers}, dag_run=dag_run)
        assert record["package"] == WHEEL and record["spec"] == [WHEEL, "numpy<1.24"]
        assert RunBuild.from_dict(record).to_dict() == record  # the one shape, through XCom and back
    printed = capsys.readouterr().out
    assert "measures mxnet @ https://wheels.example/" in printed and SECRET not in printed


def test_resolve_probe_prints_the_build_without_credentials(monkeypatch, capsys):
    from mxbench.airflow_glue import bisect_tasks

    manifest = [entry("2026-01-01"), Build(dt.date(2026, 2, 1), "mxnet==1.9.1", "i", commit="c" * 40)]
    monkeypatch.setattr(mxnet_builds, "load_manifest", lambda *a: manifest)
    monkeypatch.setattr(mxnet_builds, "install_spec", lambda build: [build.package])
    monkeypatch.setattr(mxnet_builds, "ensure_venv", _venv_fails)
    record = bisect_tasks.resolve_probe.function(
        params={"good_build": "2026-01-01", "bad_build": "2026-02-01", "launchers": ["local"],
                "only_variants": ["cpu1-bs64"]}, run_id="manual__1", dag_run=SimpleNamespace(dag_id="mxbench_bisect"))
    assert record["package"] == WHEEL and record["label"] == "1.9.1" and SECRET not in record["unsupported"]
    printed = capsys.readouterr().out
    assert "(mxnet @ https://wheels.example/" in printed and SECRET not in printed


@pytest.mark.parametrize("spec", [
    {"package": WHEEL, "version": "1.9.1", "spec": [f"numpy @ https://bob:{SECRET}@w.example/n.whl", WHEEL]},
    {"package": WHEEL + "\nx", "version": "1.9.1", "spec": [WHEEL]},
    {"package": WHEEL, "version": "1.9.1", "spec": [WHEEL, f"--index-url=https://bob:{SECRET}@pypi.example/"]},
    {"package": WHEEL, "version": "1.9.1", "spec": f"numpy @ https://bob:{SECRET}@w.example/n.whl"},
])
def test_the_trainers_venv_maker_refuses_a_spec_without_showing_credentials(spec):
    with pytest.raises(MxbenchError) as raised:
        host_build.parse_spec(json.dumps(spec))
    assert SECRET not in str(raised.value)


RAW = {"package", "requirement", "pin", "spec"}


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return None


def test_no_f_string_shows_a_package_raw():
    raw = []
    for root in (REPO / "plugins" / "mxbench", REPO / "tasks" / "mxbench_train"):
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FormattedValue) and _name(node.value) in RAW:
                    raw.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node.value)}")
    assert not raw, "shown without redact():\n" + "\n".join(raw)


def test_the_static_check_sees_a_raw_package():
    tree = ast.parse('print(f"measures {build.package} and {record[\'package\']}")')
    assert [_name(n.value) for n in ast.walk(tree) if isinstance(n, ast.FormattedValue)] == ["package", "package"]


def test_a_regression_alert_names_the_builds_without_credentials():
    from mxbench.regression.regression_rule import alert

    finding = {"status": "regression", "message": "cpu1-bs64 under local: 80 samples/s against 100",
               "baseline_builds": [WHEEL], "baseline_runs": []}
    text = alert([finding], WHEEL)
    assert SECRET not in text and "this build: mxnet @ https://wheels.example/" in text

"""An MXNet build's venv on a training host (``mxbench_train.host_build``), run as the SSH launcher
runs it there: ``python -P -m mxbench_train.host_build`` with the training env's interpreter.

Real throughout: one real venv with a real MXNet 1.9.0 from pip (this machine's pip configuration),
made once for the file by two callers at once; a pip whose index refuses connections; a make
stopped by SIGTERM.
"""
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import train_python

pytestmark = pytest.mark.slow  # builds MXNet venvs

BUILD = {"package": "mxnet==1.9.0", "version": "1.9.0",
         "spec": ["mxnet==1.9.0", "numpy<1.24", "opencv-python-headless==4.11.0.86"]}
OTHER_BUILD = {"package": "mxnet==1.8.0.post0", "version": "1.8.0.post0", "spec": ["mxnet==1.8.0.post0"]}
MAKE_TIMEOUT_S = 900


def host_build_argv(workdir, build=BUILD, *options):
    spec = build if isinstance(build, str) else json.dumps(build)
    return [train_python(), "-P", "-m", "mxbench_train.host_build", "--workdir", str(workdir), "--spec-json", spec,
            *options]


def host_build(workdir, build=BUILD, *options, env=None, timeout=MAKE_TIMEOUT_S):
    """One call; (CompletedProcess, wall seconds)."""
    started = time.monotonic()
    done = subprocess.run(host_build_argv(workdir, build, *options), capture_output=True, text=True, env=env,
                          timeout=timeout)
    return done, time.monotonic() - started


def printed(done) -> dict:
    """The one JSON line of a call that succeeded."""
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0])


def refusal(done) -> str:
    """The one ``error:`` line of a call that was refused, without ``error: ``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-3000:]
    assert done.stdout == ""
    return lines[0][len("error: "):]


def site_packages(venv) -> Path:
    (site,) = Path(venv).glob("lib/python3.*/site-packages")
    return site


def pyvenv_cfg(venv) -> dict:
    lines = (Path(venv) / "pyvenv.cfg").read_text().splitlines()
    return dict(line.split(" = ", 1) for line in lines if " = " in line)


def offline_env(**pip):
    """This environment without its PIP_* settings, plus ``pip``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, **pip}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The build's venv, made once for the file, by two callers at once (two tasks, or two hosts on
    one NFS home): (workdir, both callers' JSON, seconds the first call took)."""
    workdir = tmp_path_factory.mktemp("host-work")
    started = time.monotonic()
    callers = [subprocess.Popen(host_build_argv(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    results = []
    try:
        for caller in callers:
            out, err = caller.communicate(timeout=MAKE_TIMEOUT_S)
            results.append(printed(subprocess.CompletedProcess(caller.args, caller.returncode, out, err)))
    finally:
        for caller in callers:
            if caller.poll() is None:
                caller.kill()
                caller.wait()
    return workdir, results, time.monotonic() - started


def test_first_use_makes_a_venv_with_the_builds_mxnet_once(made):
    workdir, results, seconds = made
    print(f"first use: made the mxnet==1.9.0 venv in {seconds:.1f} s (its own figure: "
          f"{max(r['seconds'] for r in results):.1f} s)")
    # one caller made it, the other waited on the lock and took it as made
    assert sorted(r["made"] for r in results) == [False, True], results
    assert results[0]["python"] == results[1]["python"] and results[0]["venv"] == results[1]["venv"]
    venv = Path(results[0]["venv"])
    assert venv.parent == workdir / "builds" and venv.name.startswith("mxnet-1.9.0-")
    assert results[0]["python"] == str(venv / "bin" / "python")
    assert all(r["mxnet_version"] == "1.9.0" for r in results)
    assert (workdir / "builds").stat().st_mode & 0o777 == 0o700
    # made from the real base interpreter, blind to the training env's site-packages (its MXNet 1.9.1)
    cfg, train_cfg = (pyvenv_cfg(path) for path in (venv, Path(train_python()).parents[1]))
    assert cfg["include-system-site-packages"] == "false" and cfg["home"] == train_cfg["home"], cfg
    # the interpreter works as a role would start it: mxnet 1.9.0 and the venv's own copy of the trainer
    check = ("import json, mxnet, mxbench_train; "
             "print(json.dumps([mxnet.__version__, mxbench_train.__file__]))")
    done = subprocess.run([results[0]["python"], "-c", check], capture_output=True, text=True, timeout=300,
                          cwd=workdir, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr[-3000:]
    version, trainer = json.loads(done.stdout.splitlines()[-1])
    assert version == "1.9.0" and Path(trainer) == site_packages(venv) / "mxbench_train" / "__init__.py"
    # the copy is the trainer's files without this host's bytecode
    copied = sorted(p.name for p in (site_packages(venv) / "mxbench_train").iterdir() if p.name != "__pycache__")
    checkout = Path(__file__).resolve().parents[2] / "tasks" / "mxbench_train"
    assert copied == sorted(p.name for p in checkout.iterdir() if p.name != "__pycache__")
    stamp = json.loads((venv / ".mxbench-build.json").read_text())
    assert stamp["spec"] == BUILD["spec"] and stamp["mxnet_version"] == "1.9.0"


def test_the_second_call_reuses_the_venv_fast(made):
    workdir, results, _ = made
    stamp = Path(results[0]["venv"]) / ".mxbench-build.json"
    before = stamp.stat().st_mtime_ns
    done, wall = host_build(workdir)
    again = printed(done)
    print(f"reuse: {again['seconds'] * 1000:.1f} ms in host_build, {wall * 1000:.0f} ms with the interpreter's start")
    assert again == {**results[0], "made": False, "seconds": again["seconds"]}
    # no pip, no import mxnet (that alone takes over half a second): stamp and digest checks only
    assert again["seconds"] < 0.1, again
    assert stamp.stat().st_mtime_ns == before


def test_check_only_passes_the_made_build_and_names_a_missing_one(made):
    workdir, results, _ = made
    done, _ = host_build(workdir, BUILD, "--check-only")
    assert printed(done) == {**results[0], "made": False, "seconds": printed(done)["seconds"]}
    entries = sorted(p.name for p in (workdir / "builds").iterdir())
    message = refusal(host_build(workdir, OTHER_BUILD, "--check-only")[0])
    assert message.startswith("MXNet build mxnet==1.8.0.post0 has no venv on this host yet "
                              f"({workdir}/builds/mxnet-1.8.0.post0-"), message
    assert message.endswith(": not made); run without --check-only to make it"), message
    assert sorted(p.name for p in (workdir / "builds").iterdir()) == entries  # nothing made, no lock file


def test_an_updated_trainer_is_copied_again_not_remade(made):
    workdir, results, _ = made
    venv = Path(results[0]["venv"])
    site = site_packages(venv)
    stamp_path = venv / ".mxbench-build.json"
    stamp = json.loads(stamp_path.read_text())
    digest = stamp["trainer_digest"]
    mxnet_file, trainer_file = (site / "mxnet" / "__init__.py").stat(), (site / "mxbench_train" / "__init__.py").stat()
    # as if mxbench_train had changed on the host since the venv's copy was made
    stamp_path.write_text(json.dumps({**stamp, "trainer_digest": "0" * 64}))
    message = refusal(host_build(workdir, BUILD, "--check-only")[0])
    assert "its copy of mxbench_train differs from" in message and "run without --check-only to update it" in message
    again = printed(host_build(workdir)[0])
    assert again["made"] is False and again["python"] == results[0]["python"]
    assert json.loads(stamp_path.read_text())["trainer_digest"] == digest
    after = site / "mxnet" / "__init__.py"
    assert (after.stat().st_ino, after.stat().st_mtime_ns) == (mxnet_file.st_ino, mxnet_file.st_mtime_ns)
    assert (site / "mxbench_train" / "__init__.py").stat().st_ino != trainer_file.st_ino  # a fresh copy
    assert not list(site.glob("mxbench_train.*")), "the copy's staging folders are left behind"
    assert printed(host_build(workdir, BUILD, "--check-only")[0])["made"] is False


def test_a_pip_that_cannot_reach_an_index_is_named_and_leaves_no_venv(tmp_path):
    env = offline_env(PIP_CONFIG_FILE="/dev/null", PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS="",
                      PIP_RETRIES="0", PIP_TIMEOUT="5")
    # a stale venv (a stamp for another spec) where this build's goes: it is remade from scratch
    venv = Path(refusal(host_build(tmp_path, BUILD, "--check-only", env=env)[0]).split("(", 1)[1].split(":")[0])
    (tmp_path / "builds").mkdir(mode=0o700)
    (venv / "bin").mkdir(parents=True)
    (venv / ".mxbench-build.json").write_text(json.dumps({"format": 1, "spec": ["mxnet==1.9.1"]}))
    (venv / "left-from-before").write_text("")
    message = refusal(host_build(tmp_path, env=env, timeout=300)[0])
    assert message.startswith("cannot make the venv of MXNet build mxnet==1.9.0 on this host: pip could not reach a "
                              "package index from this host (set PIP_INDEX_URL or the connection's mxbench_builds "
                              "map): pip install mxnet==1.9.0 numpy<1.24 opencv-python-headless==4.11.0.86 failed "
                              "(exit 1): "), message
    assert "ERROR: No matching distribution found for mxnet==1.9.0" in message, message
    assert [p.name for p in (tmp_path / "builds").iterdir()] == [venv.name + ".lock"]


def test_a_make_stopped_by_sigterm_leaves_no_half_venv(tmp_path):
    # an index that takes the connection and never answers: pip waits, the task is killed meanwhile
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = offline_env(PIP_CONFIG_FILE="/dev/null", PIP_FIND_LINKS="", PIP_RETRIES="0", PIP_TIMEOUT="120",
                          PIP_INDEX_URL=f"http://127.0.0.1:{silent.getsockname()[1]}/simple")
        caller = subprocess.Popen(host_build_argv(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
        try:
            deadline = time.monotonic() + 120
            while not list(tmp_path.glob("builds/*/.mxbench-pip.log")) and time.monotonic() < deadline:
                assert caller.poll() is None, caller.communicate()
                time.sleep(0.1)
            assert list(tmp_path.glob("builds/*/.mxbench-pip.log")), "pip never started"
            caller.send_signal(signal.SIGTERM)
            out, err = caller.communicate(timeout=30)
        finally:
            if caller.poll() is None:
                caller.kill()
                caller.wait()
    message = refusal(subprocess.CompletedProcess(caller.args, caller.returncode, out, err))
    assert message.startswith("stopped by SIGTERM while making or updating the venv of MXNet build mxnet==1.9.0; "
                              "nothing half done will be used ("), message
    assert [p.suffix for p in (tmp_path / "builds").iterdir()] == [".lock"]


@pytest.mark.parametrize("spec_json, message", [
    ("mxnet==1.9.0", r"--spec-json is not JSON \(Expecting value"),
    (json.dumps({**BUILD, "spec": ["numpy<1.24", "mxnet==1.9.0"]}),
     r"--spec-json: package 'mxnet==1\.9\.0' must be spec\[0\], which is 'numpy<1\.24'"),
    (json.dumps({**BUILD, "spec": ["mxnet==1.9.0", "numpy<1.24\n--index-url=http://evil.example/simple"]}),
     r"--spec-json: spec\[1\] 'numpy<1\.24\\n--index-url=http://evil\.example/simple' is not a one-line string"),
    (json.dumps({**BUILD, "spec": ["mxnet==1.9.0", "--index-url=http://evil.example/simple"]}),
     r"--spec-json: spec\[1\] '--index-url=http://evil\.example/simple' is a pip option, not a requirement"),
    (json.dumps({**BUILD, "spec": ["mxnet==1.9.0", ""]}), r"--spec-json: spec\[1\] is empty"),
    (json.dumps({**BUILD, "spec": "mxnet==1.9.0"}),
     r"--spec-json: spec must be a non-empty list of requirement strings, not 'mxnet==1\.9\.0'"),
    (json.dumps({**BUILD, "version": 1.9}), r"--spec-json: version must be a string, not float 1\.9"),
    (json.dumps({"package": "mxnet==1.9.0", "spec": ["mxnet==1.9.0"], "pins": []}),
     r"--spec-json: unknown key\(s\) pins; missing version; expected package, version, spec"),
    (json.dumps(BUILD["spec"]), r"--spec-json must be an object with package, version, spec, not list"),
])
def test_a_bad_spec_is_refused_by_name_before_anything_is_made(tmp_path, spec_json, message):
    refused = refusal(host_build(tmp_path, spec_json)[0])
    assert re.match(message, refused), refused
    assert not (tmp_path / "builds").exists()


def test_a_work_folder_others_may_write_to_is_refused_before_anything_is_made(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    workdir.chmod(0o777)
    message = refusal(host_build(workdir)[0])
    assert message == (f"work folder {workdir} is writable by others (mode 0777): another user could plant files "
                       "there; chmod 700 it")
    assert list(workdir.iterdir()) == []


def test_a_python_that_cannot_make_venvs_says_what_to_install(tmp_path):
    # Debian's python3 without python3-venv: no usable ensurepip
    no_ensurepip = ("import sys; sys.modules['ensurepip'] = None; from mxbench_train.host_build import main; "
                    "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([train_python(), "-P", "-c", no_ensurepip, *host_build_argv(tmp_path)[4:]],
                          capture_output=True, text=True, timeout=60)
    assert refusal(done) == (f"{train_python()} on this host cannot make venvs (no ensurepip module): install "
                             "python3-venv there, or give prebuilt interpreters in the connection's mxbench_builds")
    assert [p.suffix for p in (tmp_path / "builds").iterdir()] == [".lock"]


def test_a_rebuilt_local_wheel_gets_a_new_venv_not_the_old_one(tmp_path, monkeypatch):
    """The attack: a venv made of a host's ``file:`` wheel, then another wheel at the same path; a
    venv keyed by the spec alone (a file: URL, no sha256) kept the old MXNet. In-process, pip faked."""
    from mxbench_train import host_build

    made = []

    def fake_make(venv, build, pip_timeout, wheel=None):
        made.append(Path(wheel_path).read_bytes())
        os.makedirs(os.path.join(venv, "bin"), exist_ok=True)
        Path(venv, "bin", "python").write_text("")
        stamp = {"format": host_build.FORMAT, "spec": build.spec, "wheel_sha256": wheel, "mxnet_version": "1.9.1",
                 "trainer_digest": host_build.trainer_digest()}
        Path(venv, host_build.STAMP).write_text(json.dumps(stamp))
        return stamp

    monkeypatch.setattr(host_build, "_make", fake_make)
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    wheel_path = tmp_path / "mxnet-1.9.1-py3-none-any.whl"
    wheel_path.write_bytes(b"wheel one")
    package = f"mxnet @ {wheel_path.as_uri()}"
    build = host_build.parse_spec(json.dumps({"package": package, "version": "1.9.1", "spec": [package]}))
    first = host_build.ensure(str(workdir), build)
    assert host_build.ensure(str(workdir), build)["venv"] == first["venv"] and made == [b"wheel one"]
    wheel_path.write_bytes(b"wheel two")  # rebuilt at the same path
    with pytest.raises(host_build.MxbenchError, match="has no venv on this host yet"):
        host_build.ensure(str(workdir), build, check_only=True)
    second = host_build.ensure(str(workdir), build)
    assert second["venv"] != first["venv"] and second["made"] and made == [b"wheel one", b"wheel two"]

"""MXNet builds (mxbench.builds.mxnet_builds): the versions manifest maps dates to builds, a bad manifest is
named entry by entry, each build gets one cached training venv (made once, under a lock, never
left half made), and an MXNet without the Module API is reported by name, never a crash."""
import datetime as dt
import hashlib
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from mxbench import config
from mxbench.builds import mxnet_builds, venv_and_data_caches
from mxbench.builds.mxnet_builds import Build, ManifestError
from mxbench_train.errors import MxbenchError

ENTRIES = [
    {"since": "2026-01-01", "package": "mxnet==1.7.0.post2", "image": "mxbench-train:1.7.0.post1-cu102",
     "commit": None, "note": "first"},
    {"since": "2026-02-01", "package": "mxnet==1.8.0.post0", "image": "mxbench-train:1.8.0.post0-cu112",
     "commit": None, "note": "second", "pins": ["numpy==1.23.5"]},
    {"since": "2026-03-01", "package": "mxnet==1.9.1", "image": "mxbench-train:1.9.1-cu112", "commit": None},
]


def write(tmp_path, entries, name="builds.json"):
    path = tmp_path / name
    path.write_text(json.dumps(entries))
    return path


@pytest.fixture
def manifest(tmp_path):
    return mxnet_builds.load_manifest(write(tmp_path, ENTRIES))


def test_a_date_maps_to_the_last_build_since_then(manifest):
    pick = lambda when: mxnet_builds.build_for(when, manifest).package  # noqa: E731
    assert pick("2026-01-01") == "mxnet==1.7.0.post2"  # on the boundary: that build
    assert pick("2026-01-31") == "mxnet==1.7.0.post2"
    assert pick(dt.date(2026, 2, 1)) == "mxnet==1.8.0.post0"
    assert pick(dt.datetime(2026, 2, 28, 23, 59)) == "mxnet==1.8.0.post0"
    assert pick("2026-03-01T00:00:00+00:00") == "mxnet==1.9.1"
    assert pick("2030-01-01") == "mxnet==1.9.1"  # after the last: the last
    # an aware datetime counts by its UTC date (a data interval start is UTC)
    assert pick(dt.datetime(2026, 1, 31, 20, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5)))) == "mxnet==1.8.0.post0"
    assert pick("2026-01-31T23:30:00Z") == "mxnet==1.7.0.post2"


def test_a_date_before_the_first_build_is_an_error_naming_it(manifest):
    with pytest.raises(ManifestError, match=r"no MXNet build for 2025-12-31: the versions manifest starts at "
                                            r"2026-01-01 \(mxnet==1\.7\.0\.post2\)"):
        mxnet_builds.build_for("2025-12-31T12:00:00+00:00", manifest)
    with pytest.raises(ManifestError, match="'yesterday' is not a date"):
        mxnet_builds.build_for("yesterday", manifest)


def test_build_fields(manifest):
    second = manifest[1]
    assert second == Build(since=dt.date(2026, 2, 1), package="mxnet==1.8.0.post0",
                           image="mxbench-train:1.8.0.post0-cu112", commit=None, note="second",
                           pins=("numpy==1.23.5",))
    assert second.version == "1.8.0.post0" and second.distribution == "mxnet"
    assert manifest[2].note == "" and manifest[2].pins == ()
    wheel = Build(dt.date(2026, 1, 1), "mxnet @ file:///w/mxnet-1.9.1-py3-none-manylinux2014_x86_64.whl", "i")
    assert wheel.version == "1.9.1"
    assert Build(dt.date(2026, 1, 1), "mxnet-cu112==1.9.1", "i").distribution == "mxnet-cu112"


def test_the_repository_manifest_backfills_three_versions_in_early_november():
    manifest = mxnet_builds.load_manifest()
    assert [b.since for b in manifest] == sorted(b.since for b in manifest)
    assert manifest[-1].package == "mxnet==1.9.1" and mxnet_builds.is_pinned(manifest[-1])
    assert manifest[-1].since <= dt.date(2026, 12, 3)
    days = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(10)]
    assert len({mxnet_builds.build_for(d, manifest).version for d in days}) == 3
    for build in manifest:
        assert build.package.startswith("mxnet=="), build
        assert build.image.startswith("mxbench-train:") and not build.pins, build
        assert "2." not in build.version[:2], "MXNet 2 has no Module API: this trainer cannot run it"


@pytest.mark.parametrize("entries, message", [
    ([], "expected a non-empty JSON list of builds"),
    ({"since": "2026-01-01"}, "expected a non-empty JSON list of builds"),
    ([ENTRIES[0], "mxnet==1.9.1"], "entry 1: expected an object with since, package, image, not str"),
    ([{"since": "2026-01-01", "package": "mxnet==1.9.1"}], r"entry 0 \(mxnet==1\.9\.1\): missing image"),
    ([{**ENTRIES[0], "since": "01/02/2026"}], r"entry 0 \(mxnet==1\.7\.0\.post2\): since '01/02/2026' is not a date"),
    ([{**ENTRIES[0], "package": "tensorflow==2.0"}], r"entry 0 \(tensorflow==2\.0\): package 'tensorflow==2\.0' is "
                                                     "neither mxnet"),
    ([{**ENTRIES[0], "package": "mxnet>=1.9"}], "is neither mxnet"),
    ([{**ENTRIES[0], "commit": "main"}], "commit must be null or a git sha"),
    ([{**ENTRIES[0], "pins": "numpy==1.23.5"}], "pins must be a list of requirement strings"),
    ([{**ENTRIES[0], "pins": ["mxnet==1.9.0"]}], "names MXNet itself"),
    ([{**ENTRIES[0], "image": 5}], "image must be a string"),
    ([{**ENTRIES[0], "version": "1.9"}], r"unknown field\(s\) version"),
    ([ENTRIES[1], ENTRIES[0]], r"entry 1 \(mxnet==1\.7\.0\.post2\): since 2026-01-01 is not after entry 0's "
                               r"\(mxnet==1\.8\.0\.post0, since 2026-02-01\)"),
    ([ENTRIES[0], {**ENTRIES[1], "since": ENTRIES[0]["since"]}], "is not after entry 0's"),
])
def test_a_bad_manifest_is_named_entry_by_entry(tmp_path, entries, message):
    path = write(tmp_path, entries)
    with pytest.raises(ManifestError, match=message) as raised:
        mxnet_builds.load_manifest(path)
    assert str(path) in str(raised.value)


def test_a_missing_or_broken_manifest_file(tmp_path):
    with pytest.raises(ManifestError, match="does not exist"):
        mxnet_builds.load_manifest(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(ManifestError, match="bad.json is not JSON"):
        mxnet_builds.load_manifest(tmp_path / "bad.json")


def test_the_install_spec_is_the_training_requirements_with_the_build_and_its_pins(tmp_path, manifest):
    reqs = tmp_path / "requirements-train.txt"
    reqs.write_text("# training\nmxnet==1.9.1\nnumpy<1.24  # why\n\nopencv-python-headless==4.11.0.86\n")
    assert mxnet_builds.install_spec(manifest[0], reqs) == ["mxnet==1.7.0.post2", "numpy<1.24",
                                                      "opencv-python-headless==4.11.0.86"]
    assert mxnet_builds.install_spec(manifest[1], reqs) == ["mxnet==1.8.0.post0", "numpy==1.23.5",
                                                      "opencv-python-headless==4.11.0.86"]
    extra = Build(dt.date(2026, 1, 1), "mxnet==1.6.0", "i", pins=("requests==2.31.0", "NumPy==1.23.4"))
    assert mxnet_builds.install_spec(extra, reqs) == ["mxnet==1.6.0", "NumPy==1.23.4",
                                                      "opencv-python-headless==4.11.0.86", "requests==2.31.0"]
    assert mxnet_builds.is_pinned(manifest[2], reqs) and not mxnet_builds.is_pinned(manifest[0], reqs)
    assert not mxnet_builds.is_pinned(Build(dt.date(2026, 1, 1), "mxnet==1.9.1", "i", pins=("numpy==1.23.5",)), reqs)


def test_the_pinned_build_is_the_training_env_itself(manifest):
    assert mxnet_builds.ensure_venv(manifest[2]) == config.train_env_python()


def test_the_base_python_is_the_one_the_training_env_names(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\nversion = 3.11.7\n"
                                     f"executable = {sys.executable}\n")
    assert mxnet_builds.base_python(str(venv / "bin" / "python")) == sys.executable
    (venv / "pyvenv.cfg").write_text("home = /nowhere\nversion = 3.11.7\n")
    with pytest.raises(MxbenchError, match="cannot find the Python the training env was made from"):
        mxnet_builds.base_python(str(venv / "bin" / "python"))
    plain = tmp_path / "image" / "bin" / "python"  # no venv (an image's interpreter): itself
    plain.parent.mkdir(parents=True)
    plain.write_text("")
    assert mxnet_builds.base_python(str(plain)) == str(plain)
    with pytest.raises(MxbenchError, match="does not exist: run scripts/setup.sh"):
        mxnet_builds.base_python(str(tmp_path / "missing" / "bin" / "python"))


def test_concurrent_callers_make_a_venv_once(tmp_path, monkeypatch, manifest):
    made = []

    def fake_create(build, venv, spec, base, pip_timeout):
        made.append(venv)
        time.sleep(0.5)  # long enough for the other callers to reach the lock
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")
        (venv / mxnet_builds.STAMP).write_text(json.dumps({"spec": spec}))

    monkeypatch.setattr(mxnet_builds, "_create", fake_create)
    monkeypatch.setattr(mxnet_builds, "base_python", lambda: sys.executable)
    results = []
    threads = [threading.Thread(target=lambda: results.append(mxnet_builds.ensure_venv(manifest[0], tmp_path)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len(set(results)) == 1 and results[0].startswith(str(tmp_path))
    # a different spec (a pin) is a different venv
    assert mxnet_builds.ensure_venv(manifest[1], tmp_path) != results[0] and len(made) == 2


@pytest.mark.slow
def test_a_failed_install_names_the_build_and_leaves_nothing_half_made(tmp_path, monkeypatch, train_py):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds nothing, fast and offline
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    build = Build(dt.date(2026, 1, 1), "mxnet==1.8.0.post0", "mxbench-train:1.8.0.post0-cu112")
    with pytest.raises(MxbenchError) as raised:
        mxnet_builds.ensure_venv(build, tmp_path / "envs")
    message = str(raised.value)
    assert message.startswith("cannot make the training env for MXNet build mxnet==1.8.0.post0 (since 2026-01-01): "
                              "pip install mxnet==1.8.0.post0 "), message
    assert "ERROR: " in message and "mxnet==1.8.0.post0" in message.split("failed", 1)[1], message
    lock = mxnet_builds.env_dir(build, tmp_path / "envs").name + ".lock"
    assert [p.name for p in (tmp_path / "envs").iterdir()] == [lock]


@pytest.mark.parametrize("checkout", [True, False], ids=["checkout", "installed wheel"])
def test_a_build_venv_imports_the_checkout_trainer_or_its_own_copy(tmp_path, monkeypatch, checkout):
    """With a checkout, the venv imports its tasks/ (a .pth file); an installed mxbench has none, so the venv gets
    a copy of the installed trainer (host_build's), and a changed trainer keys another venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    monkeypatch.setattr(mxnet_builds, "TRAINER", config.REPO / "tasks" if checkout else None)
    build = Build(dt.date(2026, 1, 1), "mxnet==1.9.0", "i")
    mxnet_builds.add_trainer(build, venv, mxnet_builds.install_spec(build))
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import mxbench_train; print(mxbench_train.__file__)"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env={})
    assert done.returncode == 0, done.stderr
    imported = Path(done.stdout.strip()).resolve()
    if checkout:
        assert imported == (config.REPO / "tasks" / "mxbench_train" / "__init__.py").resolve()
    else:
        assert venv.resolve() in imported.parents
        assert sorted(p.name for p in imported.parent.glob("*.py")) == sorted(
            p.name for p in (config.REPO / "tasks" / "mxbench_train").glob("*.py"))
        key = mxnet_builds.env_dir(build, tmp_path / "envs", base=sys.executable)
        monkeypatch.setattr(mxnet_builds.host_build, "trainer_digest", lambda: "0" * 64)
        assert mxnet_builds.env_dir(build, tmp_path / "envs", base=sys.executable) != key


def fake_python(tmp_path, mxnet_init: str) -> str:
    """An interpreter whose ``import mxnet`` is ``mxnet_init`` (and the checkout's trainer)."""
    fake = tmp_path / "fake-site"
    (fake / "mxnet").mkdir(parents=True)
    (fake / "mxnet" / "__init__.py").write_text(mxnet_init)
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}:{config.REPO / "tasks"}" exec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_an_mxnet_without_the_module_api_is_named(tmp_path):
    # as the real wheel: mx.__version__ "2.0.0beta1", the distribution's version 2.0.0b1
    python = fake_python(tmp_path, '__version__ = "2.0.0beta1"\n')
    info = tmp_path / "fake-site" / "mxnet-2.0.0b1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mxnet\nVersion: 2.0.0b1\n")
    assert mxnet_builds.check_trainer(python) == ("MXNet 2.0.0b1 is not supported by this trainer: "
                                                  "it has no Module API (MXNet 2 removed it)")
    # the trainer itself says the same, as one error line
    done = subprocess.run([python, "-m", "mxbench_train", "train", "--benchmark", "1", "--num-layers", "8",
                           "--kv-store", "local", "--log-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == ["error: " + mxnet_builds.unsupported_message("2.0.0b1")], done.stderr


def test_check_trainer_passes_an_mxnet_1_and_names_a_broken_one(tmp_path):
    good = fake_python(tmp_path / "good", '__version__ = "1.9.1"\nclass mod:\n    Module = object\n')
    assert mxnet_builds.check_trainer(good) is None
    broken = fake_python(tmp_path / "broken", 'raise OSError("libquadmath.so.0: cannot open shared object file")\n')
    assert mxnet_builds.check_trainer(broken) == (f"cannot import mxnet with {broken}: OSError: libquadmath.so.0: "
                                            "cannot open shared object file")
    assert mxnet_builds.check_trainer(str(tmp_path / "none")).startswith("cannot run the training python")


def test_check_trainer_passes_the_training_env(train_py):
    assert mxnet_builds.check_trainer(train_py) is None


@pytest.mark.slow
def test_a_second_build_gets_its_own_venv_once_and_trains(cifar_rec, tmp_path):
    build = mxnet_builds.build_for("2026-11-05")  # the repository manifest's 1.9.0
    assert build.package == "mxnet==1.9.0" and not mxnet_builds.is_pinned(build)
    started = time.monotonic()
    python = mxnet_builds.ensure_venv(build)
    made_in = time.monotonic() - started
    assert Path(python).parent.parent.parent == config.home() / "envs"
    started = time.monotonic()
    assert mxnet_builds.ensure_venv(build) == python
    assert time.monotonic() - started < 1.0, "the second call must be a cache hit"
    stamp = json.loads((Path(python).parent.parent / mxnet_builds.STAMP).read_text())
    assert stamp["mxnet_version"] == "1.9.0" and stamp["spec"][0] == "mxnet==1.9.0"
    assert mxnet_builds.check_trainer(python) is None
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    done = subprocess.run([python, "-m", "mxbench_train", "train", "--num-layers", "8", "--kv-store", "local",
                           "--batch-size", "32", "--num-epochs", "1", "--disp-batches", "5",
                           "--data-train", cifar_rec / "cifar10_train.rec", "--data-val", cifar_rec / "cifar10_val.rec",
                           "--log-dir", log_dir], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (log_dir / "rank0.log").read_text()
    assert '"mxnet_version": "1.9.0"' in log and '"status": "ok"' in log and "Validation-accuracy" in log
    print(f"made the mxnet==1.9.0 venv in {made_in:.1f} s")


# --- where a build's wheel may come from ------------------------------------------------------

SHA = "ab" * 32


@pytest.mark.parametrize("package, pins, message", [
    ("mxnet @ http://bob:s3cret@wheels.example/mxnet-1.9.1-py3-none-any.whl", [],
     r"entry 0 \(mxnet @ http://wheels\.example/mxnet-1\.9\.1-py3-none-any\.whl\): package: "
     r"http://wheels\.example/mxnet-1\.9\.1-py3-none-any\.whl is fetched over http without "
     r"#sha256=<64 lowercase hex digits> \(anyone on the path can swap it\); add the wheel's SHA-256"),
    ("mxnet @ https://wheels.example/mxnet-1.9.1-py3-none-any.whl?token=s3cret", [],
     r"https://wheels\.example/mxnet-1\.9\.1-py3-none-any\.whl\?token=REDACTED is fetched over https without "
     r"#sha256=<64 lowercase hex digits> \(https vouches for the server, not the file\)"),
    (f"mxnet @ https://wheels.example/mxnet-1.9.1-py3-none-any.whl#sha256={SHA.upper()}", [], "without #sha256="),
    (f"mxnet @ https://wheels.example/mxnet-1.9.1-py3-none-any.whl#md5={'0' * 32}", [], "without #sha256="),
    ("mxnet @ git+https://wheels.example/mxnet-1.9.1-py3-none-any.whl", [],
     r"a wheel must be a file://, https:// or http:// URL, not git\+https://"),
    ("mxnet==1.9.1", ["numpy @ http://bob:s3cret@wheels.example/numpy-1.23.5-cp311-cp311-linux_x86_64.whl"],
     r"entry 0 \(mxnet==1\.9\.1\): pins: http://wheels\.example/numpy-1\.23\.5-cp311-cp311-linux_x86_64\.whl is "
     r"fetched over http without #sha256="),
])
def test_a_wheel_fetched_over_the_network_must_carry_its_sha256(tmp_path, package, pins, message):
    path = write(tmp_path, [{"since": "2026-01-01", "package": package, "image": "i", "pins": pins}])
    with pytest.raises(ManifestError, match=message) as raised:
        mxnet_builds.load_manifest(path)
    assert "s3cret" not in str(raised.value) and "bob" not in str(raised.value)


def test_a_local_wheel_and_a_hashed_download_are_accepted(tmp_path):
    packages = ["mxnet @ file:///wheels/mxnet-1.9.1-py3-none-any.whl",
                f"mxnet @ https://wheels.example/mxnet-1.9.1-py3-none-any.whl#sha256={SHA}",
                f"mxnet-cu112 @ http://wheels.example/mxnet_cu112-1.9.1-py3-none-manylinux2014_x86_64.whl#sha256={SHA}"]
    entries = [{"since": f"2026-0{i + 1}-01", "package": p, "image": "i"} for i, p in enumerate(packages)]
    manifest = mxnet_builds.load_manifest(write(tmp_path, entries))
    assert [(b.distribution, b.version) for b in manifest] == [("mxnet", "1.9.1"), ("mxnet", "1.9.1"),
                                                               ("mxnet-cu112", "1.9.1")]


def test_ensure_venv_refuses_an_unhashed_download_before_pip_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(mxnet_builds, "_create", lambda *a: pytest.fail("pip must not run"))
    monkeypatch.setattr(mxnet_builds, "base_python", lambda: sys.executable)
    build = Build(dt.date(2026, 1, 1), "mxnet @ http://bob:s3cret@wheels.example/mxnet-1.9.1-py3-none-any.whl", "i")
    with pytest.raises(MxbenchError) as raised:
        mxnet_builds.ensure_venv(build, tmp_path / "envs")
    assert str(raised.value) == (
        "refusing to install MXNet build mxnet @ http://wheels.example/mxnet-1.9.1-py3-none-any.whl (since "
        "2026-01-01): http://wheels.example/mxnet-1.9.1-py3-none-any.whl is fetched over http without "
        "#sha256=<64 lowercase hex digits> (anyone on the path can swap it); add the wheel's SHA-256 "
        "(sha256sum FILE) to the URL")
    assert not (tmp_path / "envs").exists()


def test_pip_checks_the_sha256_a_wheel_url_carries(tmp_path):
    """Why the hash is asked for: pip installs from the URL only the bytes it names (a real pip,
    a real wheel over a loopback http server)."""
    import hashlib
    import http.server
    import zipfile

    served = tmp_path / "served"
    served.mkdir()
    wheel = served / "mxnet-1.9.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("mxnet/__init__.py", "__version__ = '1.9.1'\n")
        archive.writestr("mxnet-1.9.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: mxnet\nVersion: 1.9.1\n")
        archive.writestr("mxnet-1.9.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                       "Tag: py3-none-any\n")
        archive.writestr("mxnet-1.9.1.dist-info/RECORD", "")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/{wheel.name}"

    def pip_download(sha):
        package = f"mxnet @ {url}#sha256={sha}"
        assert mxnet_builds.url_problem(package) is None
        return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index",
                               "--disable-pip-version-check", "-d", str(tmp_path / f"got-{sha[:4]}"), package],
                              capture_output=True, text=True, timeout=120)
    try:
        wrong = pip_download("f" * 64)
        right = pip_download(digest)
    finally:
        server.shutdown()
    assert wrong.returncode != 0 and "DO NOT MATCH THE HASHES" in wrong.stdout + wrong.stderr, wrong
    assert right.returncode == 0 and (tmp_path / f"got-{digest[:4]}" / wheel.name).is_file(), right


# --- builds by commit: a wheel with its sha256, or a source-built image -----------------------

SHA = "ab" * 32
WHEEL_URL = "https://wheels.example/mxnet-1.9.1-py3-none-manylinux2014_x86_64.whl"


def one_entry(tmp_path, **entry):
    return mxnet_builds.load_manifest(write(tmp_path, [{"since": "2026-04-01", "image": "mxbench-train:1.9.1-cu112",
                                                   **entry}]))[0]


def fake_wheel(folder: Path, content: bytes = b"not really a wheel") -> Path:
    """Only its bytes matter: the hash is checked before pip would open it."""
    wheel = folder / "mxnet-1.9.1-py3-none-manylinux2014_x86_64.whl"
    wheel.write_bytes(content)
    return wheel


def test_a_commit_from_a_wheel_is_recorded_with_its_sha256(tmp_path):
    build = one_entry(tmp_path, package=f"mxnet @ {WHEEL_URL}", commit="0123abcd", sha256=SHA)
    assert build.commit == "0123abcd" and build.sha256 == SHA and not build.source_only
    assert build.package == f"mxnet @ {WHEEL_URL}#sha256={SHA}"  # pip checks the download against it
    assert mxnet_builds.install_spec(build)[0] == build.package
    assert "commit 0123abcd" in str(build)


@pytest.mark.parametrize("entry, message", [
    ({"package": f"mxnet @ {WHEEL_URL}", "commit": "0123abcd"},
     r"entry 0 \(mxnet @ https://wheels.example/.*\): a build of commit 0123abcd from a wheel needs the wheel's "
     r"sha256 field"),
    ({"package": f"mxnet @ {WHEEL_URL}", "sha256": "AB" * 32}, "sha256 must be the wheel's SHA-256"),
    ({"package": f"mxnet @ {WHEEL_URL}", "sha256": "ab12"}, "sha256 must be the wheel's SHA-256"),
    ({"package": "mxnet==1.9.1", "sha256": SHA}, "sha256 is for a wheel"),
    ({"package": f"mxnet @ {WHEEL_URL}#sha256={'cd' * 32}", "sha256": SHA}, "differs from its sha256 field"),
    ({"package": "mxnet==1.9.1", "commit": "0123abcd"},
     r"commit 0123abcd has no wheel .* built from docker/train-source.Dockerfile at that commit, tagged "
     r"\.\.\.:src-0123abcd, not 'mxbench-train:1.9.1-cu112'"),
    ({"package": "mxnet==1.9.1", "commit": "0123abcd", "image": "mxbench-train:src-99999999"}, "has no wheel"),
])
def test_a_commit_must_say_how_to_get_its_build(tmp_path, entry, message):
    with pytest.raises(ManifestError, match=message):
        one_entry(tmp_path, **entry)


def test_a_source_built_commit_runs_only_in_its_image(tmp_path):
    build = one_entry(tmp_path, package="mxnet==1.9.1", commit="0123abcd5678", image="mxbench-train:src-0123abcd")
    assert build.source_only and build.commit == "0123abcd5678"
    # the pinned release is not that commit: no venv of it, no training env standing in for it
    with pytest.raises(MxbenchError, match=r"MXNet build mxnet==1\.9\.1 \(since 2026-04-01, commit 0123abcd5678\) "
                                           r"is built from source: .* only its image mxbench-train:src-0123abcd"):
        mxnet_builds.ensure_venv(build, tmp_path / "envs")
    assert not (tmp_path / "envs").exists()


def test_a_local_wheel_path_is_a_file_url_checked_before_install(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = fake_wheel(wheels)
    right = hashlib.sha256(wheel.read_bytes()).hexdigest()
    build = one_entry(tmp_path, package="wheels/" + wheel.name, commit="0123abcd", sha256=right)
    assert build.package == f"mxnet @ {wheel.resolve().as_uri()}"  # relative to the manifest's folder
    mxnet_builds.check_wheel(build)  # the bytes the manifest names: no error

    wrong = one_entry(tmp_path, package=str(wheel), commit="0123abcd", sha256=SHA)
    with pytest.raises(MxbenchError) as raised:
        mxnet_builds.ensure_venv(wrong, tmp_path / "envs")
    assert str(raised.value) == (f"refusing to install MXNet build {wrong}: its wheel {wheel.resolve()} has SHA-256 "
                                 f"{right}, the manifest says {SHA} (a changed or wrong file)")
    lock = mxnet_builds.env_dir(wrong, tmp_path / "envs").name + ".lock"
    assert [p.name for p in (tmp_path / "envs").iterdir()] == [lock]

    wheel.unlink()
    with pytest.raises(MxbenchError, match=r"refusing to install MXNet build .*commit 0123abcd.*: cannot read its "
                                           r"wheel .*mxnet-1\.9\.1-py3-none-manylinux2014_x86_64\.whl"):
        mxnet_builds.check_wheel(build)


def test_a_rebuilt_wheel_or_a_corrected_sha256_never_reuses_the_old_venv(tmp_path, monkeypatch):
    """The attack: a venv made of one wheel, then another wheel at the same path (with its sha256
    corrected, or with none): a venv keyed by the install spec (a file: URL, no sha256) kept the old
    MXNet, and check_wheel never ran again."""
    made = []

    def fake_create(build, venv, spec, base, pip_timeout):
        made.append((venv.name, Path(urllib.parse.urlsplit(build.package.split(" @ ")[1]).path).read_bytes()))
        (venv / "bin").mkdir(parents=True, exist_ok=True)  # the real one starts from scratch
        (venv / "bin" / "python").write_text("")
        stamp = {"spec": spec, "wheel_sha256": mxnet_builds.wheel_digest(build)}
        (venv / mxnet_builds.STAMP).write_text(json.dumps(stamp))

    monkeypatch.setattr(mxnet_builds, "_create", fake_create)
    monkeypatch.setattr(mxnet_builds, "base_python", lambda: sys.executable)
    monkeypatch.setattr(venv_and_data_caches, "prune_builds", lambda *a, **k: None)
    envs = tmp_path / "envs"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = fake_wheel(wheels, b"wheel one")
    first = one_entry(tmp_path, package=str(wheel), commit="0123abcd", sha256=hashlib.sha256(b"wheel one").hexdigest())
    one = mxnet_builds.ensure_venv(first, envs)
    assert mxnet_builds.ensure_venv(first, envs) == one and len(made) == 1  # cached while nothing changed

    fake_wheel(wheels, b"wheel two")  # rebuilt at the same path, the manifest's sha256 corrected
    second = one_entry(tmp_path, package=str(wheel), commit="0123abcd", sha256=hashlib.sha256(b"wheel two").hexdigest())
    assert second.package == first.package and mxnet_builds.install_spec(second) == mxnet_builds.install_spec(first)
    two = mxnet_builds.ensure_venv(second, envs)
    assert two != one and made[-1][1] == b"wheel two"
    # the old entry again: its venv holds the bytes its sha256 names (checked when it was made)
    assert mxnet_builds.ensure_venv(first, envs) == one and len(made) == 2

    # no sha256 in the manifest: the local file's bytes key the venv, hashed on every use
    plain = one_entry(tmp_path, package=str(wheel))
    three = mxnet_builds.ensure_venv(plain, envs)
    fake_wheel(wheels, b"wheel three")
    four = mxnet_builds.ensure_venv(plain, envs)
    assert three == two  # the same bytes as the second entry's: the same venv
    assert four not in (one, two) and made[-1][1] == b"wheel three" and len(made) == 3

    # a stamp that does not name the entry's digest (planted, or made before digests) is made again
    stamp = Path(four).parent.parent / mxnet_builds.STAMP
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "wheel_sha256": "cd" * 32}))
    assert mxnet_builds.ensure_venv(plain, envs) == four and len(made) == 4

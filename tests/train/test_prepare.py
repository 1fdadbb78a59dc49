"""CIFAR-10 -> RecordIO through MXNet's im2rec: round trip, cache, atomicity, bad input."""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import run_trainer, train_python

pytestmark = pytest.mark.slow  # CIFAR-10 to RecordIO with im2rec, several times

# Reads the .rec back through ImageRecordIter (what training uses) and compares every
# image with the source arrays: labels and pixels must be exact.
READ_BACK = r"""
import pickle, sys
import numpy as np, mxnet as mx
rec, batch_dir, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data, labels = [], []
for name in ["data_batch_%d" % i for i in range(1, 6)]:
    with open(f"{batch_dir}/{name}", "rb") as f:
        b = pickle.load(f, encoding="bytes")
    data.append(b["data"]); labels += b["labels"]
src = np.concatenate(data).reshape(-1, 3, 32, 32)
it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 32, 32), batch_size=count, shuffle=False)
batch = it.next()
got = batch.data[0].asnumpy()
assert got.shape == src.shape, (got.shape, src.shape)
assert np.array_equal(batch.label[0].asnumpy().astype(int), np.array(labels)), "labels differ"
assert np.array_equal(got.astype(np.uint8), src), "pixels differ"
print("ok", len(labels))
"""


def test_im2rec_round_trip_is_exact(cifar_rec, cifar_source):
    manifest = json.loads((cifar_rec / "manifest.json").read_text())
    assert manifest["synthetic"] is True and manifest["verified"] is False
    assert manifest["splits"]["train"]["records"] == 1000 and manifest["splits"]["val"]["records"] == 200
    assert sum(manifest["splits"]["train"]["label_histogram"].values()) == 1000
    done = subprocess.run([train_python(), "-c", READ_BACK, cifar_rec / "cifar10_train.rec", cifar_source, "1000"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok 1000"), done.stderr[-2000:]


def test_rerun_with_same_input_is_a_fast_cache_hit(cifar_rec, cifar_source):
    before = {p.name: p.stat().st_mtime_ns for p in cifar_rec.glob("cifar10_*")}
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", cifar_rec, "--allow-unverified")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["cache_hit"] is True and manifest["seconds"] < 1.0
    assert {p.name: p.stat().st_mtime_ns for p in cifar_rec.glob("cifar10_*")} == before


def test_archive_from_a_file_url_is_converted_and_labelled_unverified(tmp_path):
    src = run_trainer("synthetic-cifar10", "--out", tmp_path / "src", "--train", 50, "--test", 10, "--archive")
    archive = src.stdout.strip()
    done = run_trainer("prepare-cifar10", "--source", f"file://{archive}", "--out", tmp_path / "out",
                       "--allow-unverified")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["source"] == f"file://{archive}" and manifest["verified"] is False
    assert manifest["splits"]["val"]["records"] == 10


def test_unofficial_source_needs_the_explicit_flag(tmp_path, cifar_source):
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", tmp_path)
    assert done.returncode == 2
    assert "is not the official archive" in done.stderr and "--allow-unverified" in done.stderr
    assert not (tmp_path / "manifest.json").exists()


def test_wrong_checksum_archive_is_refused(tmp_path):
    fake = tmp_path / "cifar-10-python.tar.gz"
    fake.write_bytes(b"\x1f\x8b" + os.urandom(1000))
    done = run_trainer("prepare-cifar10", "--source", fake, "--out", tmp_path / "out")
    assert done.returncode == 2 and "MD5" in done.stderr and str(fake) in done.stderr


def test_corrupt_archive_names_the_archive(tmp_path):
    fake = tmp_path / "cifar-10-python.tar.gz"
    fake.write_bytes(b"\x1f\x8b" + os.urandom(1000))
    done = run_trainer("prepare-cifar10", "--source", fake, "--out", tmp_path / "out", "--allow-unverified")
    assert done.returncode == 2
    assert f"CIFAR-10 archive {fake} is corrupt" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("source, message", [
    ("/nonexistent/cifar-10-python.tar.gz", "does not exist"),
    ("http://127.0.0.1:9/cifar-10-python.tar.gz", "cannot download CIFAR-10 from"),
])
def test_missing_source_is_one_line_error(tmp_path, source, message):
    done = run_trainer("prepare-cifar10", "--source", source, "--out", tmp_path / "out")
    assert done.returncode == 2 and message in done.stderr


def test_unwritable_output_directory(tmp_path, cifar_source):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", blocker / "out", "--allow-unverified")
    assert done.returncode == 2 and f"output directory {blocker / 'out'} is not writable" in done.stderr


def test_interrupted_run_leaves_nothing_that_looks_complete(tmp_path, cifar_source):
    out = tmp_path / "out"
    proc = subprocess.Popen([train_python(), "-m", "mxbench_train", "prepare-cifar10", "--source", cifar_source,
                             "--out", out, "--allow-unverified"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(out.glob(".tmp-*/scratch-path")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # mid-way through writing images
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    scratch = Path(next(out.glob(".tmp-*/scratch-path")).read_text())
    assert not (out / "manifest.json").exists()
    assert not (out / "cifar10_train.rec").exists()
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", out, "--allow-unverified")
    assert done.returncode == 0 and json.loads(done.stdout)["cache_hit"] is False
    assert not list(out.glob(".tmp-*")) and not scratch.exists()  # the interrupted run's leftovers are gone


def test_changed_source_is_reconverted(tmp_path, cifar_source):
    src = tmp_path / "cifar-10-batches-py"  # where the regeneration below writes
    shutil.copytree(cifar_source, src)
    out = tmp_path / "out"
    assert run_trainer("prepare-cifar10", "--source", src, "--out", out, "--allow-unverified").returncode == 0
    first = json.loads((out / "manifest.json").read_text())["key"]
    regen = run_trainer("synthetic-cifar10", "--out", tmp_path, "--train", 1000, "--test", 200, "--seed", 7)
    assert regen.returncode == 0
    done = run_trainer("prepare-cifar10", "--source", src, "--out", out, "--allow-unverified")
    manifest = json.loads(done.stdout)
    assert manifest["cache_hit"] is False and manifest["key"] != first


def test_relative_output_directory(tmp_path, cifar_source):
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", "data", "--allow-unverified",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "data" / "cifar10_train.rec").is_file() and (tmp_path / "data" / "manifest.json").is_file()

"""The trainer, run for real on tiny sizes: MXNet's standard lines, structured events, bad input."""
import re

import pytest

from conftest import run_trainer
from mxbench_train.events import parse_event

TINY = ("--num-layers", "8", "--kv-store", "local", "--batch-size", "50", "--disp-batches", "5")
SPEED = re.compile(r"Node\[0\] Epoch\[(\d+)\] Batch \[\d+-\d+\]\tSpeed: ([\d.]+) samples/sec\taccuracy=([\d.]+)")
TIME_COST = re.compile(r"Node\[0\] Epoch\[(\d+)\] Time cost=([\d.]+)")
VALIDATION = re.compile(r"Node\[0\] Epoch\[(\d+)\] Validation-accuracy=([\d.]+)")


def events(text):
    return [e for e in map(parse_event, text.splitlines()) if e]


def test_training_on_the_generated_rec_prints_mxnet_standard_lines(cifar_rec, tmp_path):
    done = run_trainer("train", *TINY, "--num-epochs", 2, "--data-train", cifar_rec / "cifar10_train.rec",
                       "--data-val", cifar_rec / "cifar10_val.rec", "--log-dir", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "rank0.log").read_text()
    assert log in done.stdout or log.strip() in done.stdout  # the rank log holds what the worker printed
    speeds = SPEED.findall(log)
    assert {e for e, *_ in speeds} == {"0", "1"} and all(float(s) > 0 for _, s, _ in speeds)
    assert [e for e, _ in TIME_COST.findall(log)] == ["0", "1"]
    assert [e for e, _ in VALIDATION.findall(log)] == ["0", "1"]
    start, end = events(log)
    assert start["event"] == "run_start" and start["rank"] == 0 and start["num_workers"] == 1
    assert start["batch_size"] == 50 and start["devices"] == ["cpu(0)"] and start["kvstore"] == "local"
    assert start["environment"]["mxnet_version"] == "1.9.1" and "DIST_KVSTORE" in start["environment"]["mxnet_features"]
    assert start["environment"]["gpu"]["available"] is False
    assert end["status"] == "ok" and end["exit_code"] == 0 and end["epochs_completed"] == 2 \
        and end["images_seen"] == 2 * 1000
    assert end["gpu"] == {"available": False, "reason": "training on the CPU"}


def test_benchmark_mode_trains_on_synthetic_batches_without_data_files(tmp_path):
    done = run_trainer("train", *TINY, "--num-epochs", 1, "--benchmark", 1, "--num-examples", 600,
                       "--data-train", tmp_path / "absent.rec", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(SPEED.findall(done.stdout)) == 2 and len(TIME_COST.findall(done.stdout)) == 1
    assert events(done.stdout)[-1]["images_seen"] == 600  # 12 batches: Speedometer at 5 and 10


@pytest.mark.slow
def test_resume_from_checkpoint(cifar_rec, tmp_path):
    common = (*TINY, "--data-train", cifar_rec / "cifar10_train.rec", "--data-val", "",
              "--model-prefix", tmp_path / "ckpt" / "resnet8")
    assert run_trainer("train", *common, "--num-epochs", 1).returncode == 0
    assert (tmp_path / "ckpt" / "resnet8-0001.params").is_file()
    done = run_trainer("train", *common, "--num-epochs", 2, "--load-epoch", 1)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [e for e, _ in TIME_COST.findall(done.stdout)] == ["1"]


def truncated(cifar_rec, tmp_path):
    rec = tmp_path / "cut.rec"
    rec.write_bytes((cifar_rec / "cifar10_train.rec").read_bytes()[:-100])
    (tmp_path / "cut.idx").write_bytes((cifar_rec / "cifar10_train.idx").read_bytes())
    return rec


def no_index(cifar_rec, tmp_path):
    rec = tmp_path / "lonely.rec"
    rec.write_bytes((cifar_rec / "cifar10_train.rec").read_bytes())
    return rec


@pytest.mark.parametrize("make_rec, extra, message", [
    (truncated, (), "--data-train {rec} is truncated"),
    (no_index, (), "--data-train {rec} has no index lonely.idx"),
    (None, ("--gpus", "0,1", "--batch-size", "5"), "--batch-size 5 is not divisible by the 2 devices"),
    (None, ("--num-layers", "10"), "--num-layers 10 is not a CIFAR ResNet depth"),
    (None, ("--kv-store", "nccl_bogus"), "argument --kv-store: invalid choice: 'nccl_bogus'"),
    (None, ("--log-dir", "/proc/mxbench"), "--log-dir /proc/mxbench is not writable"),
    (None, ("--lr", "1e30", "--disp-batches", "2"), "training diverged at epoch 0"),
])
def test_bad_input_is_a_one_line_error_naming_input_and_cause(cifar_rec, tmp_path, make_rec, extra, message):
    rec = make_rec(cifar_rec, tmp_path) if make_rec else cifar_rec / "cifar10_train.rec"
    done = run_trainer("train", *TINY, "--num-epochs", 1, "--data-train", rec, "--data-val", "", *extra)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message.format(rec=rec) in errors[0], done.stderr[-2000:]


def test_diverged_run_still_writes_its_end_event(cifar_rec):
    done = run_trainer("train", *TINY, "--num-epochs", 1, "--data-train", cifar_rec / "cifar10_train.rec",
                       "--data-val", "", "--lr", "1e30", "--disp-batches", "2")
    assert done.returncode == 3
    end = events(done.stdout)[-1]
    assert end["event"] == "run_end" and end["status"] == "error" and "diverged" in end["error"]
    assert end["exit_code"] == 3

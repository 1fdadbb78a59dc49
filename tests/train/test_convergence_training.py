"""Time to accuracy from a real training run: the trainer's log, parsed, gives validation accuracy
for every epoch, and the seconds to a target are the epoch time costs the log printed, summed."""
import re

from conftest import run_trainer
from mxbench.results.convergence import time_to_target
from mxbench.results.parse import parse_log

TIME_COST = re.compile(r"Epoch\[(\d+)\] Time cost=([\d.]+)")
VALIDATION = re.compile(r"Epoch\[(\d+)\] Validation-accuracy=([\d.]+)")
EPOCHS = 3


def test_a_trained_runs_epochs_carry_validation_accuracy_and_give_its_time_to_target(cifar_rec, tmp_path):
    done = run_trainer("train", "--num-layers", 8, "--kv-store", "local", "--batch-size", 50, "--disp-batches", 5,
                       "--num-epochs", EPOCHS, "--data-train", cifar_rec / "cifar10_train.rec",
                       "--data-val", cifar_rec / "cifar10_val.rec", "--log-dir", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    log = tmp_path / "rank0.log"
    epochs = parse_log(log).epochs
    assert list(epochs["epoch"]) == list(range(EPOCHS))
    assert epochs["validation_accuracy"].between(0, 1).all() and epochs["time_cost_s"].gt(0).all()

    # what the log printed, read independently of the parser
    text = log.read_text()
    seconds = [float(s) for _, s in TIME_COST.findall(text)]
    accuracy = [float(a) for _, a in VALIDATION.findall(text)]
    assert accuracy == list(epochs["validation_accuracy"])
    # the synthetic labels are learnable: the curve leaves chance (10%) within a few epochs
    assert max(accuracy) > 0.2, accuracy

    best = max(accuracy)
    first_best = accuracy.index(best)
    got = time_to_target(epochs, best)
    assert got["epochs_to_target"] == first_best + 1
    assert abs(got["time_to_target_s"] - sum(seconds[:first_best + 1])) < 1e-6
    assert time_to_target(epochs, best + 0.005)["time_to_target_s"] is None  # above every epoch

"""The trainer's command line, composed from argument groups as MXNet's common/fit.py does.

Defaults are the seed study's (ResNet-110 on CIFAR-10, SGD 0.1, steps at 200 and 250).
Everything here is stdlib, so a bad flag is refused before mxnet is even imported.
"""
import argparse
import tempfile
from pathlib import Path

from .errors import MxbenchError
from .role_plan import KVSTORES


def add_fit_args(parser):
    fit = parser.add_argument_group("Training", "model, optimiser and devices")
    fit.add_argument("--num-layers", type=int, default=110, help="ResNet depth, 6n+2 (110, 20, 8, ...)")
    fit.add_argument("--gpus", default="", help="GPU ids, e.g. 0,1,2,3; empty trains on the CPU")
    fit.add_argument("--kv-store", default="device", choices=KVSTORES, help="MXNet kvstore type")
    fit.add_argument("--num-epochs", type=int, default=300)
    fit.add_argument("--lr", type=float, default=0.1)
    fit.add_argument("--lr-factor", type=float, default=0.1, help="lr multiplier at each step")
    fit.add_argument("--lr-step-epochs", default="200,250", help="epochs at which the lr steps down")
    fit.add_argument("--mom", type=float, default=0.9)
    fit.add_argument("--wd", type=float, default=0.0001)
    fit.add_argument("--batch-size", type=int, default=128, help="per worker, split over its devices")
    fit.add_argument("--disp-batches", type=int, default=20, help="Speedometer period in batches")
    fit.add_argument("--model-prefix", default=None, help="checkpoint prefix (rank 0 saves)")
    fit.add_argument("--load-epoch", type=int, default=None, help="resume from this checkpoint epoch")
    fit.add_argument("--log-dir", default=None,
                     help="write rank<r>.log, gpu-rank<r>.csv and gpu-topo.txt here")
    fit.add_argument("--gpu-sample-ms", type=int, default=500, help="GPU telemetry period")
    return fit


def add_data_args(parser):
    data = parser.add_argument_group("Data", "RecordIO input and augmentation")
    data.add_argument("--data-train", default="data/cifar10_train.rec")
    data.add_argument("--data-val", default="data/cifar10_val.rec", help="empty: no validation")
    data.add_argument("--image-shape", default="3,28,28")
    data.add_argument("--pad-size", type=int, default=4)
    data.add_argument("--rgb-mean", default="123.68,116.779,103.939")
    data.add_argument("--num-classes", type=int, default=10)
    data.add_argument("--num-examples", type=int, default=None,
                      help="training images per epoch; default: the records in --data-train")
    data.add_argument("--data-nthreads", type=int, default=4, help="decoding threads")
    data.add_argument("--benchmark", type=int, default=0, choices=(0, 1),
                      help="1: synthetic in-memory batches, no I/O")
    return data


def build_parser(prog="python -m mxbench_train train"):
    parser = argparse.ArgumentParser(prog=prog, description="Train a CIFAR ResNet with MXNet's Module API")
    add_fit_args(parser)
    add_data_args(parser)
    return parser


def units_per_stage(num_layers):
    if num_layers < 8 or (num_layers - 2) % 6:
        raise MxbenchError(
            f"--num-layers {num_layers} is not a CIFAR ResNet depth: it must be 6n+2 (8, 20, 32, 56, 110, ...)")
    return (num_layers - 2) // 6


def parse_ints(text, flag):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MxbenchError(f"{flag} {text!r} is not a comma-separated list of integers") from None


def parse_floats(text, flag, count):
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != count:
        raise MxbenchError(f"{flag} {text!r} must be {count} comma-separated numbers")
    return values


def validate(args):
    """Check everything that needs no mxnet; raise MxbenchError naming the flag."""
    units_per_stage(args.num_layers)
    gpus = parse_ints(args.gpus, "--gpus")
    devices = max(1, len(gpus))
    for flag, value in (("--batch-size", args.batch_size), ("--num-epochs", args.num_epochs),
                        ("--disp-batches", args.disp_batches), ("--data-nthreads", args.data_nthreads)):
        if value < 1:
            raise MxbenchError(f"{flag} must be at least 1, got {value}")
    if args.batch_size % devices:
        raise MxbenchError(
            f"--batch-size {args.batch_size} is not divisible by the {devices} devices in --gpus {args.gpus}")
    shape = parse_ints(args.image_shape, "--image-shape")
    if len(shape) != 3 or min(shape) < 1:
        raise MxbenchError(f"--image-shape {args.image_shape!r} must be channels,height,width")
    parse_floats(args.rgb_mean, "--rgb-mean", 3)
    parse_ints(args.lr_step_epochs, "--lr-step-epochs")
    if args.load_epoch is not None and not args.model_prefix:
        raise MxbenchError("--load-epoch needs --model-prefix")
    if args.log_dir:
        _check_writable(Path(args.log_dir), "--log-dir")
    return gpus


def _check_writable(path, flag):
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):  # unique: several workers may share the folder
            pass
    except OSError as exc:
        raise MxbenchError(f"{flag} {path} is not writable: {exc.strerror or exc}") from None

"""``python -m mxbench_train train``: train a CIFAR ResNet, logging MXNet's standard lines.

Speedometer, ``Time cost`` and ``Validation-accuracy`` lines come from MXNet
itself, prefixed ``Node[rank]`` as in MXNet's common/fit.py, so every MXNet log
parser reads them; one structured line at start and one at end carry what a
plain log cannot (rank, devices, environment, images seen, exit status).
"""
import logging
import math
import sys
import time
from pathlib import Path

from . import host_watch, run_files, telemetry
from .args import build_parser, parse_floats, parse_ints, validate
from .errors import MxbenchError, NonFiniteLoss
from .events import format_event
from .recordio_check import check_record_file, idx_path

log = logging.getLogger("mxbench_train")


def setup_logging(rank, log_dir):
    """Root logger (MXNet's Module and Speedometer log there): stdout, plus rank<r>.log."""
    fmt = logging.Formatter(f"%(asctime)-15s Node[{rank}] %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handlers = [logging.StreamHandler(sys.stdout)]
    if log_dir:
        handlers.append(logging.FileHandler(run_files.worker_log(log_dir, rank), mode="w"))
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)


def synthetic_iter(mx, num_classes, data_shape, batches):
    """In-memory random batches (``--benchmark 1``): measures compute, not I/O."""
    import numpy as np

    class SyntheticDataIter(mx.io.DataIter):
        def __init__(self):
            super().__init__(data_shape[0])
            rng = np.random.RandomState(0)
            self.data = mx.nd.array(rng.uniform(-1, 1, data_shape))
            self.label = mx.nd.array(rng.randint(0, num_classes, (data_shape[0],)))
            self.count = 0

        @property
        def provide_data(self):
            return [mx.io.DataDesc("data", self.data.shape)]

        @property
        def provide_label(self):
            return [mx.io.DataDesc("softmax_label", self.label.shape)]

        def reset(self):
            self.count = 0

        def next(self):
            self.count += 1
            if self.count > batches:
                raise StopIteration
            return mx.io.DataBatch(data=[self.data], label=[self.label], pad=0,
                                   provide_data=self.provide_data, provide_label=self.provide_label)

    return SyntheticDataIter()


def record_iters(mx, args, shape, rank, workers):
    mean = dict(zip(("mean_r", "mean_g", "mean_b"), parse_floats(args.rgb_mean, "--rgb-mean", 3)))
    common = dict(label_width=1, data_name="data", label_name="softmax_label", data_shape=shape,
                  batch_size=args.batch_size, preprocess_threads=args.data_nthreads,
                  num_parts=workers, part_index=rank, **mean)
    train = mx.io.ImageRecordIter(path_imgrec=args.data_train, path_imgidx=str(idx_path(args.data_train)),
                                  rand_crop=1, rand_mirror=1, pad=args.pad_size, fill_value=127,
                                  shuffle=True, **common)
    val = None
    if args.data_val:
        val = mx.io.ImageRecordIter(path_imgrec=args.data_val, path_imgidx=str(idx_path(args.data_val)),
                                    rand_crop=0, rand_mirror=0, shuffle=False, **common)
    return train, val


def lr_scheduler(mx, args, epoch_size):
    begin = args.load_epoch or 0
    steps = [epoch_size * (e - begin) for e in parse_ints(args.lr_step_epochs, "--lr-step-epochs") if e > begin]
    if not steps:
        return None
    return mx.lr_scheduler.MultiFactorScheduler(step=steps, factor=args.lr_factor, base_lr=args.lr)


class Progress:
    """Batch-end callback: counts images and stops on a non-finite network output."""

    def __init__(self, batch_size, period, lr):
        self.batch_size, self.period, self.lr = batch_size, period, lr
        self.images = 0

    def __call__(self, param):
        self.images += self.batch_size
        if (param.nbatch + 1) % self.period:
            return
        module = param.locals.get("self")
        outputs = module.get_outputs() if module is not None else []
        if outputs and not math.isfinite(float(outputs[0].sum().asscalar())):
            raise NonFiniteLoss(
                f"training diverged at epoch {param.epoch} batch {param.nbatch}: the network output is NaN/inf "
                f"(loss is not finite; lower --lr, now {self.lr})")


def mxnet_version(mx) -> str:
    """The installed distribution's version (``2.0.0b1``), else ``mx.__version__``."""
    try:
        from importlib.metadata import version

        return version("mxnet")
    except Exception:  # another distribution name (mxnet-cu112) or a source build on PYTHONPATH
        return getattr(mx, "__version__", "unknown")


def require_module_api(mx):
    """This trainer drives MXNet 1.x's Module API, which MXNet 2 removed: name that, never crash."""
    if not hasattr(getattr(mx, "mod", None), "Module"):
        raise MxbenchError(f"MXNet {mxnet_version(mx)} is not supported by this trainer: it has no Module API "
                           "(MXNet 2 removed it)")


def main(argv):
    args = build_parser().parse_args(argv)
    gpus = validate(args)
    shape = tuple(parse_ints(args.image_shape, "--image-shape"))
    if args.benchmark:
        num_examples = args.num_examples or 50000
    else:
        train_records = check_record_file(args.data_train, "--data-train")
        if args.data_val:
            check_record_file(args.data_val, "--data-val")
        num_examples = args.num_examples or train_records

    import mxnet as mx  # after validation: a bad flag fails in milliseconds

    require_module_api(mx)

    from .resnet import cifar_resnet

    kv = mx.kvstore.create(args.kv_store)
    rank, workers = kv.rank, kv.num_workers
    setup_logging(rank, args.log_dir)
    devices = [mx.gpu(i) for i in gpus] or [mx.cpu()]
    sampler = telemetry.GpuSampler(
        gpus, run_files.gpu_telemetry(args.log_dir or ".", rank),
        topo_path=Path(args.log_dir) / run_files.GPU_TOPOLOGY if args.log_dir and rank == 0 else None,
        period_ms=args.gpu_sample_ms)
    log.info(format_event(
        "run_start", rank=rank, num_workers=workers, kvstore=args.kv_store,
        devices=[str(d) for d in devices], batch_size=args.batch_size, num_layers=args.num_layers,
        num_epochs=args.num_epochs, num_examples=num_examples, image_shape=list(shape),
        benchmark=bool(args.benchmark), data_train=None if args.benchmark else args.data_train,
        argv=list(argv), environment=telemetry.environment(mx)))

    progress = Progress(args.batch_size, args.disp_batches, args.lr)
    started = time.time()
    status, error, exit_code, epochs_done = "error", None, 1, 0
    sampler.start()
    host = host_watch.HostWatch(gpus).start()
    try:
        epoch_size = max(num_examples // args.batch_size // workers, 1)
        if args.benchmark:
            train = synthetic_iter(mx, args.num_classes, (args.batch_size, *shape), epoch_size)
            val = None
        else:
            train, val = record_iters(mx, args, shape, rank, workers)
        arg_params = aux_params = None
        network = cifar_resnet(args.num_layers, args.num_classes)
        if args.load_epoch is not None:
            try:
                network, arg_params, aux_params = mx.model.load_checkpoint(args.model_prefix, args.load_epoch)
            except (OSError, mx.base.MXNetError) as exc:
                raise MxbenchError(f"cannot load checkpoint {args.model_prefix} epoch {args.load_epoch}: "
                                   f"{str(exc).splitlines()[0]}") from None

        def count_epoch(epoch, *_):
            nonlocal epochs_done
            epochs_done = epoch + 1

        checkpoint = [count_epoch]
        if args.model_prefix and rank == 0:
            Path(args.model_prefix).parent.mkdir(parents=True, exist_ok=True)
            checkpoint.append(mx.callback.do_checkpoint(args.model_prefix))
        module = mx.mod.Module(network, context=devices)
        module.fit(
            train, eval_data=val, eval_metric="accuracy", kvstore=kv,
            optimizer="sgd",
            optimizer_params={"learning_rate": args.lr, "momentum": args.mom, "wd": args.wd,
                              "lr_scheduler": lr_scheduler(mx, args, epoch_size)},
            initializer=mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2),
            arg_params=arg_params, aux_params=aux_params, allow_missing=True,
            begin_epoch=args.load_epoch or 0, num_epoch=args.num_epochs,
            batch_end_callback=[mx.callback.Speedometer(args.batch_size, args.disp_batches), progress],
            epoch_end_callback=checkpoint)
        status, exit_code = "ok", 0
    except MxbenchError as exc:
        error, exit_code = str(exc), exc.exit_code
        raise
    except mx.base.MXNetError as exc:
        error, exit_code = str(exc).strip().splitlines()[0], MxbenchError.exit_code
        raise MxbenchError(f"MXNet failed on rank {rank}: {error}") from None
    finally:
        log.info(format_event(
            "run_end", rank=rank, num_workers=workers, status=status, exit_code=exit_code, error=error,
            epochs_completed=epochs_done, images_seen=progress.images,
            wall_time_s=round(time.time() - started, 3), gpu=sampler.stop(), host=host.stop()))
    return 0

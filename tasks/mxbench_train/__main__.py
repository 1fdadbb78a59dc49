"""``python -m mxbench_train {train,serve,launch,supervise,pod-role,reap,probe,quiet-probe,prepare-cifar10,
synthetic-cifar10,mxnet-check}``.

Bad input ends with one line, ``error: <input>: <cause>``, and a non-zero exit.
"""
import argparse
import os
import sys

from .errors import MxbenchError

USAGE = __doc__.split("\n\n")[0].replace("\n", "")  # the first paragraph, one line


def cmd_launch(argv):
    from .localhost import free_port
    from .plan_runner import run_plan
    from .role_plan import KVSTORES, Job, plan_roles

    parser = argparse.ArgumentParser(prog="python -m mxbench_train launch",
                                     description="Run a training job's role plan as local processes")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--servers", type=int, default=None, help="default: one per worker")
    parser.add_argument("--kv-store", default="dist_sync", choices=KVSTORES)
    parser.add_argument("--log-dir", required=True, help="roles/<role>.log, rank<r>.log, pids.json")
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds before every role is killed")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER, help="-- then the trainer's flags")
    args = parser.parse_args(argv)
    trainer_args = args.trainer_args[1:] if args.trainer_args[:1] == ["--"] else args.trainer_args
    job = Job(trainer_args=("--kv-store", args.kv_store, "--log-dir", args.log_dir, *trainer_args),
              kvstore=args.kv_store, workers=args.workers, servers=args.servers, port=free_port(),
              python=sys.executable, cores_per_host=os.cpu_count() or 1)
    try:
        plan = plan_roles(job)
    except ValueError as exc:
        raise MxbenchError(f"launch: {exc}") from None
    for result in run_plan(plan, args.log_dir, deadline_s=args.deadline):
        print(f"{result.name}@{result.host}: exit {result.returncode}, log {result.log}")
        if result.warning:
            print(f"warning: {result.warning}", file=sys.stderr)
    return 0


def cmd_supervise(argv):
    import math

    from .supervise import supervise

    def heartbeat_timeout(text):
        """--heartbeat-timeout: finite seconds, >= 0."""
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (0: off), not {text!r}")
        return value

    parser = argparse.ArgumentParser(
        prog="python -m mxbench_train supervise",
        usage="python -m mxbench_train supervise --role NAME --pid-file PATH [--heartbeat-timeout SECONDS] "
              "-- ARGV...",
        description="Run ARGV (no shell) in its own process group and stop that group when stdin reaches "
                    "EOF (the SSH channel closed) or on SIGTERM, SIGHUP or SIGINT; exit with ARGV's status "
                    "(128+N when signal N ended it), 127 when ARGV cannot start")
    parser.add_argument("--role", required=True, help="the role's name, in the pid file and messages")
    parser.add_argument("--pid-file", required=True, help='written as {NAME: {"pid", "start"}}, what reap reads')
    parser.add_argument("--heartbeat-timeout", type=heartbeat_timeout, default=0.0, metavar="SECONDS",
                        help="also stop the group, as on EOF, when nothing has been read from stdin for SECONDS "
                             "(any byte counts; the launcher writes one every few seconds). A connection that "
                             "dies silently (network partition, suspended host) never reaches EOF: a stock "
                             "sshd (ClientAliveInterval 0) does not notice a dead client. Default 0: off")
    # ARGV is everything after the first "--", as is: none of it is parsed here
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    if not argv[split + 1:]:
        parser.error("the role's command goes after --")
    return supervise(args.role, args.pid_file, argv[split + 1:], heartbeat_timeout=args.heartbeat_timeout)


def cmd_pod_role(argv):
    from .pod_outputs import run_role

    parser = argparse.ArgumentParser(
        prog="python -m mxbench_train pod-role", usage="python -m mxbench_train pod-role --outputs DIR -- ARGV...",
        description="Run a role in a Kubernetes pod, then print DIR's files into the pod log for the launcher")
    parser.add_argument("--outputs", required=True, help="the folder the role writes its rank logs to")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("give the role's command after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    return run_role(args.outputs, argv[split + 1:])


def cmd_reap(argv):
    import json

    from .supervise import reap_dir

    parser = argparse.ArgumentParser(prog="python -m mxbench_train reap",
                                     description="SIGKILL what the pid files DIR/*.json list and is still "
                                                 "there; print the [role, pid] killed as one JSON line")
    parser.add_argument("--pids-dir", required=True, help="supervise's --pid-file folder")
    args = parser.parse_args(argv)
    print(json.dumps([[role, pid] for role, pid in reap_dir(args.pids_dir)]))
    return 0


def cmd_probe(argv):
    import json

    from .probe import probe

    parser = argparse.ArgumentParser(prog="python -m mxbench_train probe",
                                     description="What this host offers a job, as one JSON line: cores, GPUs, "
                                                 "and a free port on --address (which proves the host owns it)")
    parser.add_argument("--address", help="the address this host's roles will bind")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.address)))
    return 0


def cmd_quiet_probe(argv):
    import json
    import math

    from .quiet_probe import sample

    def window(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or not 0 < value <= 60:
            raise argparse.ArgumentTypeError(f"must be more than 0 and at most 60 seconds, not {text!r}")
        return value

    parser = argparse.ArgumentParser(prog="python -m mxbench_train quiet-probe",
                                     description="How busy this host is over a short window, as one JSON line: "
                                                 "CPU pressure, steal, and the cores used by processes that are "
                                                 "not this probe's (nor its ancestors': the SSH session)")
    parser.add_argument("--seconds", type=window, default=2.0, help="the window, seconds (default 2)")
    args = parser.parse_args(argv)
    print(json.dumps(sample(args.seconds)))
    return 0


def cmd_prepare(argv):
    import json

    parser = argparse.ArgumentParser(prog="python -m mxbench_train prepare-cifar10",
                                     description="CIFAR-10 python archive -> RecordIO with im2rec (cached)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="cifar-10-python.tar.gz, its extracted folder, or a URL")
    source.add_argument("--source-env", metavar="VAR",
                        help="read the source from environment variable VAR: a URL with credentials "
                             "stays out of the process list")
    parser.add_argument("--out", required=True, help="folder for cifar10_{train,val}.{rec,idx} and manifest.json")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="accept a source that is not the official archive (recorded as unverified)")
    parser.add_argument("--threads", type=int, default=None, help="default: every core")
    parser.add_argument("--untrusted-source", action="store_true",
                        help="the source is untrusted input (a trigger param): a path or file:// URL must resolve "
                             "under an --allowed-root or a folder of MXBENCH_DATASET_ROOTS; an http(s) URL must not "
                             "reach a loopback, private, link-local or reserved address unless its host is in "
                             "MXBENCH_DATASET_PRIVATE_HOSTS. Without it: any source")
    parser.add_argument("--allowed-root", action="append", default=[], metavar="DIR",
                        help="with --untrusted-source: a folder local sources may come from (repeatable)")
    args = parser.parse_args(argv)
    from .cifar10 import prepare
    from .download import SourcePolicy

    if args.allowed_root and not args.untrusted_source:
        parser.error("--allowed-root only applies with --untrusted-source")
    if args.source_env:
        args.source = os.environ.get(args.source_env) or ""
        if not args.source:
            raise MxbenchError(f"prepare-cifar10 --source-env {args.source_env}: the variable is empty or unset")
    policy = SourcePolicy.from_env(args.allowed_root) if args.untrusted_source else None
    manifest = prepare(args.source, args.out, args.allow_unverified, args.threads, policy)
    print(json.dumps(manifest, indent=1, sort_keys=True))
    return 0


def cmd_synthetic(argv):
    parser = argparse.ArgumentParser(prog="python -m mxbench_train synthetic-cifar10",
                                     description="Write SYNTHETIC data in the CIFAR-10 python layout")
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", type=int, default=50000, help="training images, a multiple of 5")
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--archive", action="store_true", help="also pack it as a .tar.gz")
    args = parser.parse_args(argv)
    from .synthetic import generate

    try:
        print(generate(args.out, args.train, args.test, args.seed, args.archive))
    except (ValueError, OSError) as exc:
        raise MxbenchError(f"synthetic-cifar10 --out {args.out}: {exc}") from None
    return 0


def cmd_mxnet_check(argv):
    """What the images' builds run: mxnet imports, has the named features, and its libmxnet.so the
    named GPU archs; prints the version, the features and the archs."""
    parser = argparse.ArgumentParser(prog="python -m mxbench_train mxnet-check",
                                     description="import mxnet; list its features and GPU archs; fail on one missing")
    parser.add_argument("--features", default="", help="comma-separated mxnet.runtime features that must be on "
                                                        "(e.g. CUDA,CUDNN,NCCL,DIST_KVSTORE,OPENCV,OPENMP)")
    parser.add_argument("--archs", default="", help='GPU archs that must have kernels, as MXNET_CUDA_ARCH ("8.0;9.0")')
    args = parser.parse_args(argv)
    import mxnet
    from mxnet.runtime import Features

    from .elf import ElfError, fatbin_archs, installed_libmxnet, names, required_archs, section

    features = Features()
    enabled = [name for name in features if features.is_enabled(name)]
    lib = installed_libmxnet()
    cubins, ptx, _ = fatbin_archs(section(lib, ".nv_fatbin"))
    print(f"mxnet {mxnet.__version__} ({lib}): features {' '.join(enabled)}; "
          f"GPU kernels SASS {names(cubins)}, PTX {names(ptx, 'compute_')}")
    try:
        want_cubins, want_ptx = required_archs(args.archs)
    except ElfError as exc:
        raise MxbenchError(f"mxnet-check --archs: {exc}") from None
    missing = [name for name in filter(None, args.features.split(",")) if name not in enabled]
    missing += [f"sm_{a}" for a in sorted(want_cubins - cubins)] + [f"compute_{a}" for a in sorted(want_ptx - ptx)]
    if missing:
        raise MxbenchError(f"mxnet-check: mxnet {mxnet.__version__} at {lib} lacks {', '.join(missing)}")
    return 0


def cmd_train(argv):
    from .train import main

    return main(argv)


def cmd_serve(_argv):
    """Scheduler or server role. A server: importing mxnet with DMLC_ROLE set runs it and exits. A
    scheduler: the same C calls without the Python package (``kvstore_scheduler``)."""
    role = os.environ.get("DMLC_ROLE")
    if role not in ("scheduler", "server"):
        raise MxbenchError(f"serve runs a scheduler or server role; DMLC_ROLE is {role!r}")
    if role == "scheduler":
        from . import kvstore_scheduler

        kvstore_scheduler.run()
        return 0
    import mxnet  # noqa: F401  (runs the role, then exits)

    return 0


COMMANDS = {"train": cmd_train, "serve": cmd_serve, "launch": cmd_launch,
            "supervise": cmd_supervise, "pod-role": cmd_pod_role, "reap": cmd_reap, "probe": cmd_probe,
            "quiet-probe": cmd_quiet_probe, "prepare-cifar10": cmd_prepare, "synthetic-cifar10": cmd_synthetic,
            "mxnet-check": cmd_mxnet_check}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    # OpenMP reads this once, at mxnet's import: a lone process gets every core
    if argv[0] not in ("supervise", "pod-role"):  # their role gets the environment exactly as given
        os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    try:
        return COMMANDS[argv[0]](argv[1:])
    except MxbenchError as exc:
        one_line = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"error: {one_line}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())

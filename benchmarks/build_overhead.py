"""What honouring an MXNet build costs the ssh launcher (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/build_overhead.py [--repeats 20] [--build 1.9.0] [--keep]

Starts one loopback sshd host (standins.sshd) in a scratch folder (its work folder and
MXBENCH_HOME there too), then, over SSH as the launcher does it:
1. first use: the build's venv made on the host (``mxbench_train.host_build``: venv, pip install
   of the build's package and the other pins of requirements-train.txt, the trainer copied in);
2. a run's set-up command as each run sends it, ``--repeats`` times: the host's run folder made
   and checked, with the build's venv found in the same command (``host_workdir --build-json``);
3. side by side with 2, interleaved, the same command without a build: what a run sends when it
   measures the host's own MXNet.
Prints the medians and the build check's overhead per run = 2 - 3 (target <= 0.1 s), and the
time the check itself takes on the host; exits 1 when over the target or when the venv could not
be made. pip uses this machine's own
configuration (its wheel folders and index). The scratch folder is removed on success unless
--keep.
"""
import argparse
import json
import os
import statistics
import sys
import time

from _stack import TRAIN_PYTHON, airflow, begin, finish, stack_env

CHECK_TARGET_S = 0.1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--build", default="1.9.0", help="a version in config/mxnet-builds.json")
    args, scratch = begin(parser, "build-overhead")
    print(f"scratch folder: {scratch}")
    stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from mxbench.airflow_glue import connections
    from mxbench.builds import mxnet_builds
    from mxbench.builds.record import RunBuild
    from mxbench.launchers.ssh.commands import build_command, setup_command
    from mxbench.launchers.ssh.ssh_launcher import run_command
    from mxbench.run_folder import RunFolder
    from standins import sshd

    build = next((b for b in mxnet_builds.load_manifest() if b.version == args.build), None)
    if build is None:
        print(f"no build {args.build} in {mxnet_builds.MANIFEST}", file=sys.stderr)
        return 2
    run_build = RunBuild(build.package, build.version, tuple(mxnet_builds.install_spec(build)), image=build.image)
    fleet = sshd.start(scratch / "sshd", addresses=["127.0.0.1"])
    ok = False
    try:
        os.environ.update(fleet.airflow_env(["mxbench_ssh_1"], mxbench_python=str(TRAIN_PYTHON)))
        airflow("db", "migrate")
        ssh = connections.launcher_for("ssh", {"ssh_connections": ["mxbench_ssh_1"]})
        (host,) = ssh.hosts
        flag = ssh._flag(host)
        client = ssh._client(host)
        command = build_command(host, run_build, host.workdir, flag)

        def timed(line: str):
            started = time.monotonic()
            code, out, err = run_command(client, line, timeout=3600)
            if code != 0:
                raise RuntimeError(f"{line[:80]}...: exit {code}: {err.strip().splitlines()[-1:] or out[-300:]}")
            return time.monotonic() - started, out

        first, out = timed(command)
        print(f"first use: made the venv of {run_build} on the host in {first:.1f} s: {out.strip()}")
        again, _ = timed(command)
        print(f"reuse at expand time (a second DAG run of the build): {again * 1000:.0f} ms")
        reuse, bare, on_host = [], [], []
        for i in range(args.repeats):  # interleaved, so that a drift hits both alike
            seconds, out = timed(setup_command(host, RunFolder(f"/bench/dag-run/with-{i}"), flag, run_build))
            reuse.append(seconds)
            on_host.append(json.loads(out.strip().splitlines()[-1])["build"]["seconds"])
            bare.append(timed(setup_command(host, RunFolder(f"/bench/dag-run/without-{i}"), flag))[0])
        overhead = statistics.median(reuse) - statistics.median(bare)
        ok = overhead <= CHECK_TARGET_S
        print(f"a run's set-up with the build check: median {statistics.median(reuse) * 1000:.0f} ms, "
              f"max {max(reuse) * 1000:.0f} ms over {args.repeats} (the check itself on the host: median "
              f"{statistics.median(on_host) * 1000:.1f} ms)")
        print(f"a run's set-up without a build: median {statistics.median(bare) * 1000:.0f} ms")
        print(f"build check overhead per run: {overhead * 1000:+.0f} ms  (target <= {CHECK_TARGET_S * 1000:.0f} ms)  "
              f"{'OK' if ok else 'OVER'}")
        ssh.close()
    except RuntimeError as exc:
        print(f"failed: {exc}", file=sys.stderr)
    finally:
        fleet.stop()
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())

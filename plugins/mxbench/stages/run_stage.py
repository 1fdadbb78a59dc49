"""The run stage: one run of the matrix under its launcher, its folder and ``meta.json`` (``run_one``).

Apart from the other stages (``pipeline``) because the run task imports it for every run: neither
this nor what it imports (launchers, caches, build provenance) loads pandas or numpy, which only
parsing and the report need (``tests/orchestration/stages/test_run_path.py``). No Airflow here.
"""
import shlex
import time
import uuid
from typing import Optional

from mxbench import launchers
from mxbench.builds import venv_and_data_caches
from mxbench.builds.build_provenance import (
    build_here,
    build_of,
    commit_in_version,
    ran_with,
    reported_commit,
    reported_version,
    same_release,
)
from mxbench.builds.record import RunBuild
from mxbench.hosts import quiet_gate
from mxbench.matrix.variants import variant_from_dict
from mxbench.run_folder import DagRunFolder, RunFolder, read_json, write_json
from mxbench.stages.dag_run_failures import root_cause
from mxbench_train.errors import MxbenchError
from mxbench_train.localhost import pid_scope
from mxbench_train.plan_runner import RoleFailed
from mxbench_train.redaction import redact
from mxbench_train.role_plan import Role


class RunFailed(RuntimeError):
    """A run that did not produce a measurement; its message names the run and the cause."""


def check_enough_data(variant, records: int):
    """Refuse a run whose workers would print no Speedometer line: it could measure nothing."""
    batches = records // variant.workers // variant.batch_size
    if batches <= variant.disp_batches:
        raise MxbenchError(
            f"each of its {variant.workers} workers gets {batches} batches of {variant.batch_size} per epoch "
            f"({records} training images), not more than --disp-batches {variant.disp_batches}: no speed "
            "would be measured; use more images or a smaller batch")


class RoundSkipped(Exception):
    """An optional round that was not needed (``stop_rule``): recorded as skipped, with the reason."""


def run_task(run: dict, dag_folder: DagRunFolder, deadline_s: float, launcher_for, task: dict,
             quiet_wait_s: float = 0, aside: Optional[RunFolder] = None, skip_reason=None, local_data=None) -> dict:
    """The run task's stage, all of it: skip an optional round that is not needed, bring the data
    and the build's venv to this worker, then run (``run_one``).

    ``skip_reason(run)``: why an optional round not started yet need not run, or None (a try that
    started it is retried as a run, and reaped); a skipped round raises RoundSkipped. ``local_data(data,
    launcher)``: the data set on this worker, where the artifact store is not this worker's home
    (another worker may have prepared the data and made the build's venv); None where it is.
    ``aside``: a folder a try killed on this worker left before it published, whose processes are stopped."""
    data = read_json(dag_folder.data)
    if data is None:
        cause = root_cause(dag_folder) or "no data.json: prepare_data has not run"
        raise RunFailed(f"run {run['key']}: {cause}")
    status = (read_json(dag_folder.run(run["key"]).meta) or {}).get("status")
    if run.get("optional") and aside is None and status in (None, "skipped") and skip_reason is not None:
        reason = skip_reason(run)
        if reason:
            record_skip(run, dag_folder, reason)
            raise RoundSkipped(reason)
    if local_data is not None:
        try:
            if aside is not None:
                launcher_for(run["launcher"]).reap(aside)
            data = local_data(data, run["launcher"])
            run = build_here(run, dag_folder)
        except Exception as exc:  # recorded as this run's cause, like any failure
            run = {**run, "unavailable": f"{exc}" if isinstance(exc, MxbenchError) else f"{type(exc).__name__}: {exc}"}
    return run_one(run, dag_folder, data, deadline_s=deadline_s, launcher_for=launcher_for, task=task,
                   quiet_wait_s=quiet_wait_s)


def run_one(run: dict, dag_folder: DagRunFolder, data: dict, deadline_s: float, launcher_for=None,
            task: Optional[dict] = None, quiet_wait_s: float = 0) -> dict:
    """Execute one run; its folder keeps logs and ``meta.json`` whatever happens.

    A run that already succeeded is not run again (a retried or cleared task
    returns it as it was, marked ``reused``); a failed attempt's folder is kept
    under ``attempts/``, after whatever of its processes still live was reaped
    (a task killed by SIGKILL cannot clean up after itself), on every host.
    ``launcher_for(name)`` gives the launcher (default: ``launchers.get``); ``task``: the Airflow
    task's worker and try number, kept in ``meta.json``. Before the launcher starts the roles, the
    run waits up to ``quiet_wait_s`` for its hosts to be quiet (``hosts.quiet_gate.check``, judged with
    the DAG run's contention thresholds from ``request.json``); ``meta.json`` keeps what it saw
    under ``quiet``, and ``started_at`` is when the run began after that wait.
    """
    folder = dag_folder.run(run["key"])
    run_dir = folder.path
    meta = read_json(folder.meta, {})
    if meta.get("status") == "ok":
        if not meta.get("reused"):
            write_json(folder.meta, {**meta, "reused": True})
        return {**summary_of(meta), "reused": True}
    launcher, setup_error = None, None
    try:
        if run.get("unavailable"):
            raise MxbenchError(run["unavailable"])
        launcher = (launcher_for or launchers.get)(run["launcher"])
    except MxbenchError as exc:
        setup_error = exc  # recorded below like any other failure of this run
    reaped = []
    if run_dir.exists():
        reaped = launcher.reap(folder) if launcher else []
        n = len(dag_folder.earlier_attempts(run["key"])) + 1
        dag_folder.attempts.mkdir(exist_ok=True)
        run_dir.replace(dag_folder.attempts / f"{run['key']}.{n}")
    run_dir.mkdir(parents=True)
    variant = variant_from_dict(run["variant"])
    asked = (build_of(run, dag_folder) or {}).get("package")  # as the report shows it: no wheel URL's credentials
    meta = {"key": run["key"], "variant": run["variant"], "launcher": run["launcher"], "repeat": run["repeat"],
            "data_dir": data["dir"], "status": "running", "started_at": time.time(), "reaped": reaped,
            "attempt": uuid.uuid4().hex, "build": {"asked": redact(asked) if asked else None},
            "machine": pid_scope(), **(task or {})}
    write_json(folder.meta, meta)
    try:
        if setup_error:
            raise setup_error
        check_enough_data(variant, data["records"]["train"])
        build = RunBuild.from_dict(build_of(run, dag_folder))
        thresholds = (read_json(dag_folder.request, {}) or {}).get("contention_thresholds")
        meta["quiet"] = quiet_gate.check(launcher, variant, quiet_wait_s, thresholds)
        meta["started_at"] = time.time()  # the run itself begins now, after its quiet wait
        write_json(folder.meta, meta)
        local_python = build.python if build and run["launcher"] == "local" else None
        with venv_and_data_caches.in_use(data["dir"], local_python):  # pruning skips them meanwhile
            gone = venv_and_data_caches.pruned_since_made(data, local_python)
            if gone:
                raise MxbenchError(gone)
            launched = launcher.execute(variant, data["dir"], folder, deadline_s, build=build)
        meta["command"] = _worker_command(launched.plan)
        meta["build"] = {"asked": redact(build.package) if build else None, "reported": reported_version(folder),
                         "python": launched.runtime.get("python"), "image": launched.runtime.get("image")}
        commit = reported_commit(folder)
        if commit:
            meta["build"]["commit"] = commit
        # an image's MXNet is the image's word: a commit's image must name the commit; a venv's is the
        # commit's wheel, which the launcher installed against its sha256
        in_image = bool(launched.runtime.get("image"))
        if build and not same_release(build.version, meta["build"]["reported"], build.commit, commit, in_image):
            where = launched.runtime.get("image") or launched.runtime.get("python")
            asked_commit = f" (commit {build.commit})" if build.commit else ""
            reported = meta["build"]["reported"]
            names_none = build.commit and not commit and not (reported and commit_in_version(reported))
            named = f", commit {commit}" if commit else ", which names no commit" if names_none else ""
            raise MxbenchError(f"it asked for {build}{asked_commit}, but its trainer imported MXNet "
                               f"{reported or '(no version reported)'}{named} ({where}): not kept "
                               f"as {redact(build.package)}")
        if launched.link_bits:
            meta["link_bits"] = launched.link_bits
        results = launched.results
        meta.update(status="ok", cause=None, roles=[vars(r) for r in results],
                    warnings=[r.warning for r in results if r.warning],
                    # first role's start to last role's exit: the trainer processes' own wall time
                    trainer_wall_s=max(r.start_s + (r.wall_s or 0) for r in results))
    except RoleFailed as exc:
        meta.update(status="failed", cause=str(exc), failed_role=exc.role.name, exit_status=exc.status,
                    link_fault=exc.link_fault)
    except MxbenchError as exc:
        meta.update(status="failed", cause=str(exc))
    except Exception as exc:  # a launcher bug still leaves a record of the run
        meta.update(status="failed", cause=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if read_json(folder.meta, {}).get("attempt") != meta["attempt"]:
            # this attempt hung, a newer one moved its folder away and owns the path now
            raise RunFailed(f"run {run['key']}: a newer attempt took over its folder; this attempt's "
                            "result is dropped") from None
        if "command" not in meta:  # the launcher failed: its records, as far as it got
            plan = [Role.from_dict(r) for r in read_json(folder.plan, [])]
            meta["command"] = _worker_command(plan)
            meta["build"].update(ran_with(folder, plan))
        meta["ended_at"] = time.time()
        meta["duration_s"] = round(meta["ended_at"] - meta["started_at"], 3)
        write_json(folder.meta, meta)
    if meta["status"] != "ok":
        raise RunFailed(f"run {run['key']} failed: {meta['cause']}")
    return summary_of(meta)


def record_skip(run: dict, dag_folder: DagRunFolder, reason: str) -> None:
    """Keep an optional round that was not needed (``stop_rule``) as a run folder whose
    ``meta.json`` says so: the tables list it as skipped, with the reason, not as failed."""
    write_json(dag_folder.run(run["key"]).meta,
               {"key": run["key"], "variant": run["variant"], "launcher": run["launcher"], "repeat": run["repeat"],
                "status": "skipped", "cause": reason, "skipped_at": time.time()})


def _worker_command(plan) -> Optional[str]:
    worker = next((r for r in plan if r.kind == "worker"), None)
    return shlex.join(worker.argv) if worker else None


def summary_of(meta: dict) -> dict:
    return {k: meta.get(k) for k in ("key", "launcher", "repeat", "status", "cause", "duration_s",
                                      "trainer_wall_s")}

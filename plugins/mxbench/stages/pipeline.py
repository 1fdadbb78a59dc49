"""The benchmark's stages, each a plain function over a DAG run's folder (no Airflow here).

The folder's layout (request, data, one folder per run, tables, report) is told once, in
``run_folder.DagRunFolder``, and every stage reads and writes it through that object. Each stage
reads what the earlier ones wrote, so any stage can be rerun, and ``mxbench report`` rebuilds the
tables and report from files.

The run stage is ``stages.run_stage.run_one``, apart so that the run task loads no pandas.
Beside the stages: ``mxbench.run_folder`` reads and writes the folder's files, ``stages.dag_run_failures``
keeps the stage failures and says why a DAG run fails (``check_runs``), ``builds.build_provenance`` says
which MXNet build a run trains with and which it did, and ``stages.regression_check`` is the
regression DAG's check against the results database.
"""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

import pandas as pd

from mxbench import config, launchers
from mxbench.builds import venv_and_data_caches
from mxbench.builds.record import RunBuild
from mxbench.hosts import quiet_gate
from mxbench.matrix.variants import (
    SYNTHETIC,
    Target,
    VariantError,
    expand_runs,
    leg,
    machine_sets,
    stop_budget,
    variant_from_dict,
)
from mxbench.results import answers, calibration, contention, convergence
from mxbench.results.metrics import (
    NoSpeedLines,
    kubernetes_gap,
    launcher_ratios,
    link_bytes_per_step,
    run_metrics,
    summarise,
)
from mxbench.results.parse import parse_log, parse_run_logs
from mxbench.run_folder import DagRunFolder, RunFolder, load_table, read_json, write_json
from mxbench.stages.dag_run_failures import clear_stage_failure, root_cause, stage_failed
from mxbench_train.data_sources import SYNTHETIC_VERSION
from mxbench_train.errors import MxbenchError
from mxbench_train.redaction import redact
from mxbench_train.telemetry import read_gpu_csv
from mxbench_train.telemetry import summarise as summarise_gpus

# --- expand ---------------------------------------------------------------------------------

def targets_for(names, launcher_for=None):
    """(targets, unavailable): what each launcher's machines offer, asked of the machines, and
    why a launcher could not be asked (a dead host, a missing connection: its runs fail with it,
    the other launchers' runs go on)."""
    launcher_for = launcher_for or launchers.get
    targets, unavailable = {}, {}
    for name in names:
        if name not in launchers.LAUNCHERS:
            continue  # expand_runs names it
        try:
            targets[name] = launcher_for(name).target()
        except MxbenchError as exc:
            unavailable[name] = f"the {name} target is unavailable: {exc}"
    return targets, unavailable


def prepare_builds(names, targets: Dict[str, Target], unavailable: Dict[str, str], build: Optional[dict],
                   launcher_for=None) -> Dict[str, str]:
    """Each launcher that could be asked gets ready to run ``build`` (an SSH host makes its venv);
    returns the launchers that cannot honour it (launcher -> why: no image for it, no interpreter),
    which expand refuses. One whose preparation failed (a host's pip cannot reach an index) joins
    ``unavailable``: its runs fail with that cause, the other launchers' go on."""
    run_build = RunBuild.from_dict(build)
    if run_build is None:
        return {}
    launcher_for = launcher_for or launchers.get
    refused = {}
    for name in names:
        if name not in targets or name in unavailable:
            continue
        try:
            launcher = launcher_for(name)
            problem = launcher.build_problem(run_build)
            if problem:
                refused[name] = problem
                continue
            launcher.prepare_build(run_build)
        except MxbenchError as exc:
            unavailable[name] = f"the {name} target cannot run {run_build}: {redact(str(exc))}"
    return refused


def expand(params: dict, folder: DagRunFolder, targets: Dict[str, Target], unavailable=None, build=None,
           dag_id: Optional[str] = None, refused: Optional[Dict[str, str]] = None,
           run_id: Optional[str] = None, contention: Optional[dict] = None) -> List[dict]:
    """The runs, written to ``request.json`` (with ``dag_id``: whose folder this is, and the DAG run's
    ``run_id``, which the report shows, and ``contention_thresholds``: ``contention``, the table
    every stage judges contended runs with, ``contention_thresholds``). ``build``: the
    MXNet build a regression run measures (a ``builds.record.RunBuild`` as a dict); each run carries
    all of it, its ``commit`` included (a commit's build runs only that commit's image), and its
    launcher runs it."""
    unavailable = unavailable or {}
    try:
        runs = expand_runs(params, targets, unavailable, refused=refused)
    except (VariantError, MxbenchError) as exc:
        stage_failed(folder, "expand", exc)
        raise
    clear_stage_failure(folder, "expand")
    run_build = RunBuild.from_dict(build)
    if run_build:  # what each run must train with, every field of it; its launcher runs that or nothing
        runs = [{**run, "build": run_build.to_dict()} for run in runs]
    # a dataset URL may carry a user and password: never written down
    recorded = {**params, "dataset": redact(params["dataset"])} if "dataset" in params else params
    chosen = params.get("launchers") or ["local"]
    sets = {name: [launcher for launcher in members if launcher in chosen] for name, members in machine_sets().items()}
    write_json(folder.request, {
        "dag_id": dag_id, "run_id": run_id, "params": recorded, "runs": runs, "build": build,
        "targets": {k: asdict(v) for k, v in targets.items()}, "unavailable": unavailable,
        "machine_sets": {k: v for k, v in sets.items() if v}, "contention_thresholds": contention or {}})
    return runs


def contention_thresholds(url: str) -> dict:
    """Each kind of machine's contention thresholds under each launcher from its latest A/A
    calibrations in the results store (``contention.from_aa``), of the DAGs the deployer trusts
    with them only (``config.calibration_dags``), their contended runs left out: ``contention.table_key`` ->
    ``Thresholds.as_dict``, looked up once when the DAG run expands; it reads, never makes or
    upgrades the store. Never fails the caller: a store that cannot be read gives no table (every
    machine's defaults) and says why, without the URL's password."""
    from mxbench import store
    from mxbench.store.store_errors import first_line

    trusted = config.calibration_dags()
    try:
        with store.errors_without_password(url):  # a driver's message may quote the URL
            rows = store.aa_interference(url, dag_ids=trusted)
    except Exception as exc:  # a database down, a driver missing: the defaults judge
        print(f"mxbench: contention thresholds: the defaults, the results store could not be read "
              f"({type(exc).__name__}: {first_line(exc)})")
        return {}
    table = {}
    for (machine, launcher), runs in rows.groupby(["environment", "launcher"]):
        calibrations = len(runs[["dag_id", "dag_run"]].drop_duplicates())
        # run ids are unique per DAG only: a calibration is its DAG and run
        runs = runs.assign(dag_run=runs["dag_id"].astype(str) + "/" + runs["dag_run"].astype(str))
        table[contention.table_key(str(machine), str(launcher))] = contention.from_aa(
            runs.to_dict("records"), calibrations, sorted(set(runs["dag_id"].astype(str)))).as_dict()
    return table


def contention_table(folder: DagRunFolder) -> dict:
    """The DAG run's contention thresholds (``request.json``; none in a folder from before them)."""
    return (read_json(folder.request, {}) or {}).get("contention_thresholds") or {}


# --- prepare data ---------------------------------------------------------------------------

def _train_cli(*args, env=None) -> subprocess.CompletedProcess:
    # an argv list, never a shell: a dataset path from the trigger form cannot inject anything
    return subprocess.run([config.train_env_python(), "-m", "mxbench_train", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def _error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return lines[-1][len("error: "):] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]


def synthetic_source(data_root: Path, images: int) -> Path:
    """Generated CIFAR-format data, made once per size and generator version, then reused.

    Two DAG runs may ask at once: they take turns on a lock per folder, so the second finds the
    first's folder complete, and a complete folder, which another run may be reading, is never
    replaced (a folder appears complete or not at all: generated aside, then renamed)."""
    folder = data_root / f"synthetic-v{SYNTHETIC_VERSION}-{images}"
    batches = folder / "cifar-10-batches-py"
    with open(data_root / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (batches / "test_batch").is_file():
            return batches
        tmp = data_root / f".{folder.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)  # left by a generation that died; we hold the lock
        done = _train_cli("synthetic-cifar10", "--out", tmp, "--train", images, "--test", max(images // 5, 10))
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise MxbenchError(f"synthetic CIFAR-10 generation failed: {_error_line(done)}")
        shutil.rmtree(folder, ignore_errors=True)  # incomplete (no test_batch), so nobody reads it
        tmp.replace(folder)
        return batches


def prepare_data(params: dict, folder: DagRunFolder, data_root: Path) -> dict:
    """CIFAR-10 -> RecordIO in the training env (cached there); ``data.json`` says what was used.
    A failure is recorded in ``stages.json`` so that every run it stopped names it."""
    try:
        data = _prepare_data(params, data_root)
    except MxbenchError as exc:
        raise MxbenchError(stage_failed(folder, "prepare_data", exc)) from None
    clear_stage_failure(folder, "prepare_data")
    write_json(folder.data, data)
    venv_and_data_caches.prune_data(data_root, used=(data["dir"], data["source"]))  # keeps this one: it is in use
    return data


def prepared_name(params: dict) -> str:
    """The prepared data set's folder name: one per source (and generator version and size)."""
    source = params.get("dataset", SYNTHETIC)
    if source == SYNTHETIC:
        return f"rec-synthetic-v{SYNTHETIC_VERSION}-{int(params.get('synthetic_images', 3000))}"
    return f"rec-{hashlib.sha1(source.encode()).hexdigest()[:12]}"


def _prepare_data(params: dict, data_root: Path) -> dict:
    data_root.mkdir(parents=True, exist_ok=True)
    source = params.get("dataset", SYNTHETIC)
    synthetic = source == SYNTHETIC
    out = data_root / prepared_name(params)
    if synthetic:
        source = synthetic_source(data_root, int(params.get("synthetic_images", 3000)))
    flags = ["--allow-unverified"] if synthetic or params.get("allow_unverified") else []
    # the dataset is a trigger param: local files only from the data folder (and the administrator's
    # MXBENCH_DATASET_ROOTS), no private addresses (MXBENCH_DATASET_PRIVATE_HOSTS): the training env
    # reads both from the environment it inherits
    flags += ["--untrusted-source", "--allowed-root", data_root]
    # through the environment, not argv: a URL's credentials never show in the process list
    done = _train_cli("prepare-cifar10", "--source-env", "MXBENCH_SOURCE", "--out", out, *flags,
                      env={"MXBENCH_SOURCE": str(source)})
    if done.returncode != 0:
        raise MxbenchError(_error_line(done))
    manifest = json.loads(done.stdout)
    return {"dir": str(out), "name": out.name, "source": manifest["source"], "synthetic": manifest["synthetic"],
            "verified": manifest["verified"], "cache_hit": manifest["cache_hit"],
            "records": {k: v["records"] for k, v in manifest["splits"].items()}}


# --- parse ----------------------------------------------------------------------------------

def gpu_usage(folder: RunFolder) -> dict:
    """Mean utilisation over the run's GPUs and the most memory any of them used, from telemetry."""
    rows = [row for csv_path in folder.gpu_telemetry() for row in read_gpu_csv(csv_path)]
    if not rows:
        return {"gpu_util_pct": None, "gpu_mem_mib": None}
    per_gpu = summarise_gpus(rows)
    return {"gpu_util_pct": sum(g["utilization_mean_pct"] for g in per_gpu) / len(per_gpu),
            "gpu_mem_mib": max(g["memory_used_max_mib"] for g in per_gpu)}


def role_notices(folder: RunFolder):
    """MXNet's C++ notices (the P2P topology among them) from the role logs: C++ writes them to
    stderr, which only the launcher's per-role logs capture; ``rank<r>.log`` has Python's logging."""
    p2p, notices = None, []
    for log in folder.role_logs():
        parsed = parse_log(log)
        p2p = p2p or parsed.p2p
        notices += [f"{log.stem}: {n}" for n in parsed.notices]
    return p2p, notices


def parse_run(run: dict, dag_folder: DagRunFolder, images_per_epoch: Optional[float] = None, launcher_for=None,
              thresholds: Optional[dict] = None):
    """(row for the runs table, tidy speed rows, tidy epoch rows) of one run; ``thresholds``: the
    DAG run's contention thresholds (``contention_table``) its contended column is judged with."""
    folder = dag_folder.run(run["key"])
    variant = variant_from_dict(run["variant"])
    meta = read_json(folder.meta)
    upstream = root_cause(dag_folder)
    row = {"key": run["key"], "variant": variant.id, "setup": variant.setup, "launcher": leg(run),
           "repeat": run["repeat"], "num_layers": variant.num_layers, "devices": variant.devices,
           "workers": variant.workers, "batch_size": variant.batch_size,
           "batch_per_device": variant.batch_per_device, "status": "not run",
           "cause": f"the run never started: {upstream}" if upstream
           else "the run never started (an upstream task failed)",
           "samples_per_sec": None, "epoch_samples_per_sec": None, "sec_per_epoch": None, "first_epoch_s": None,
           "warmup_excluded": None, "validation_accuracy": None, "gpu_util_pct": None, "gpu_mem_mib": None,
           "p2p_pairs": None, "started_at": None, "ended_at": None, "duration_s": None, "trainer_wall_s": None,
           "reused": False, "warnings": None, "link_bits": None, "link_bytes_per_step": None, "link_fault": None,
           "mxnet_asked": (run.get("build") or {}).get("package"), "mxnet_reported": None, "runtime": None,
           "worker": None, "try_number": None, "quiet_wait_s": None, "quiet": None,
           "earlier_attempts": len(dag_folder.earlier_attempts(run["key"])),
           **dict.fromkeys(contention.COLUMNS)}
    parsed = parse_run_logs(folder.logs())
    tag = {"key": run["key"], "variant": variant.id, "launcher": leg(run), "repeat": run["repeat"]}
    speed, epochs = parsed.speed.assign(**tag), parsed.epochs.assign(**tag)
    if meta is None:
        return row, speed, epochs
    row.update(status=meta["status"], cause=meta.get("cause"), duration_s=meta.get("duration_s"),
               trainer_wall_s=meta.get("trainer_wall_s"), started_at=meta.get("started_at"),
               ended_at=meta.get("ended_at"), reused=bool(meta.get("reused")),
               worker=meta.get("worker"), try_number=meta.get("try_number"), link_fault=meta.get("link_fault"),
               **quiet_gate.columns(meta.get("quiet")))
    ran = meta.get("build") or {}  # what the run trained with, as its launcher and trainer said
    row.update(mxnet_reported=ran.get("reported"), runtime=ran.get("image") or ran.get("python"))
    if meta["status"] == "skipped":  # an optional round, not needed: settled (stop_rule)
        return row, speed, epochs
    if meta["status"] == "running":
        # its task died mid-run (parse runs only once every run task has ended): stop what it left
        try:
            reaped = (launcher_for or launchers.get)(run["launcher"]).reap(folder)
        except MxbenchError as exc:
            reaped, row["warnings"] = [], f"its leftover processes could not be reaped: {exc}"
        row.update(status="failed", cause="the run was interrupted (its task died mid-run)"
                   + (f"; killed {len(reaped)} leftover process(es)" if reaped else ""))
    # C++ notices of every run, failed ones too: a failed run's last C++ words are often its cause
    p2p, notices = role_notices(folder)
    write_json(folder.notices, notices)
    start = next((e for e in parsed.events if e.get("event") == "run_start"), {})
    environment = start.get("environment")
    malformed = answers.problem(answers.RUN_ENVIRONMENT, environment) if environment is not None else None
    if row["status"] == "ok" and malformed:  # a host's word: its numbers go with it
        row.update(status="failed", cause=f"parse: the machine facts its trainer reported are malformed "
                                          f"(environment: {malformed}): its numbers are not kept")
    if row["status"] == "ok":
        try:
            metrics = run_metrics(parsed, f"run {run['key']}", images_per_epoch)
        except NoSpeedLines as exc:
            row.update(status="failed", cause=f"parse: {exc}")
        else:
            metrics["p2p"] = metrics["p2p"] or p2p
            warnings = [*meta.get("warnings", []), *filter(None, [parsed.restart_note()])]
            row.update({k: metrics[k] for k in ("samples_per_sec", "epoch_samples_per_sec", "sec_per_epoch",
                                                "first_epoch_s", "warmup_excluded", "validation_accuracy")})
            judged_with = contention.thresholds_for(thresholds, contention.run_machine(parsed.events),
                                                      run["launcher"])
            row.update(**gpu_usage(folder), **contention.summarise(parsed.events, judged_with),
                       warnings="; ".join(warnings) or None, link_bits=meta.get("link_bits"),
                       link_bytes_per_step=link_bytes_per_step(parsed.events))
            if metrics["p2p"]:
                row["p2p_pairs"] = f"{metrics['p2p']['enabled_pairs']}/{metrics['p2p']['total_pairs']}"
            write_json(folder.metrics, {**metrics, "environment": environment})
    return row, speed, epochs


def parse_all(folder: DagRunFolder, launcher_for=None) -> Dict[str, str]:
    """Tidy tables of every run in the request: ``tables/{runs,speed,epochs}.csv``."""
    request = read_json(folder.request)
    if request is None:
        cause = root_cause(folder)
        raise MxbenchError(cause or f"{folder.path} has no request.json: not a benchmark run folder")
    # the job's images per epoch when the logs carry no run_end event (a trainer killed late)
    images = (read_json(folder.data, {}) or {}).get("records", {}).get("train")
    rows, speeds, epochs = [], [], []
    for run in request["runs"]:
        row, speed, epoch = parse_run(run, folder, images, launcher_for, request.get("contention_thresholds"))
        rows.append(row)
        speeds.append(speed)
        epochs.append(epoch)
    folder.tables.mkdir(exist_ok=True)
    pd.DataFrame(rows).to_csv(folder.table("runs"), index=False)
    pd.concat(speeds, ignore_index=True).to_csv(folder.table("speed"), index=False)
    pd.concat(epochs, ignore_index=True).to_csv(folder.table("epochs"), index=False)
    return {name: str(folder.table(name)) for name in ("runs", "speed", "epochs")}


# --- join -----------------------------------------------------------------------------------

def join(folder: DagRunFolder, stored: Optional[calibration.Stored] = None) -> Dict[str, str]:
    """``tables/summary.csv`` (the seed-style table), ``tables/ratios.csv`` (launcher ratios),
    ``tables/k8s_gap.csv`` (the k8s/ssh gap split into container and network, where it can be)
    and ``tables/aa_noise.csv`` (an A/A calibration's noise floor, ``calibration``). Beside each
    launcher ratio, the A/A noise: this DAG run's own arms', else ``stored`` (``stored_aa_noise``).
    ``tables/convergence.csv``: each variant's time to the preset's target accuracy (``convergence``;
    empty when the preset has none)."""
    runs = load_table(folder.table("runs"))
    params = read_json(folder.request, {}).get("params") or {}
    summarise(runs).to_csv(folder.table("summary"), index=False)
    ratios = launcher_ratios(runs, budget=stop_budget(params), target_gap=params.get("target_gap"))
    own = calibration.noise_floor(runs, ratios)
    own.to_csv(folder.table("aa_noise"), index=False)
    noise = calibration.Stored(own, "this DAG run's A/A arms") if not own.empty else stored
    calibration.beside(ratios, noise).to_csv(folder.table("ratios"), index=False)
    kubernetes_gap(runs).to_csv(folder.table("k8s_gap"), index=False)
    times = convergence.run_times(runs, load_table(folder.table("epochs")), convergence.target_for(params))
    convergence.summarise(times).to_csv(folder.table("convergence"), index=False)
    return {name: str(folder.table(name)) for name in ("summary", "ratios", "k8s_gap", "aa_noise", "convergence")}


def machines(folder: DagRunFolder) -> Dict[str, str]:
    """Launcher (or arm) -> the hardware fingerprint its measured runs' metrics.json give."""
    from mxbench.store import fingerprint

    runs = load_table(folder.table("runs"))
    found = {}
    for key, launcher in zip(runs.get("key", []), runs.get("launcher", [])):
        environment = (read_json(folder.run(key).metrics) or {}).get("environment")
        if isinstance(environment, dict):
            found.setdefault(launcher, fingerprint(environment)[0])
    return found


def stored_aa_noise(folder: DagRunFolder, url: str) -> calibration.Stored:
    """The A/A calibrations the results store at ``url`` holds for the machines this DAG run
    measured on (``calibration.stored_noise``). Never fails the caller: a store that cannot be
    read gives no noise and says so (without the URL's password) in the ratios' noise column."""
    from mxbench import store
    from mxbench.store.store_errors import first_line

    fingerprints = machines(folder)
    try:
        with store.errors_without_password(url):  # a driver's message may quote the URL
            rows = store.aa_calibrations(url, set(fingerprints.values()))
    except Exception as exc:  # a database down, a driver missing: the verdicts stand without the noise
        why = f"the results store could not be read ({type(exc).__name__}: {first_line(exc)})"
        print(f"mxbench: A/A calibrations: {why}")
        return calibration.Stored(None, "", unavailable=f"A/A noise not shown: {why}")
    return calibration.Stored(calibration.stored_noise(rows, fingerprints),
                              "the latest A/A calibration on this hardware")


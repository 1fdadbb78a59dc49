"""The benchmark's stages, each a plain function over a DAG run's folder (no Airflow here).

``$MXBENCH_HOME/runs/<dag run>/`` holds ``request.json`` (params and the
expanded runs), ``data.json`` (the prepared data set), one folder per run
(logs, per-role logs, telemetry, ``plan.json``, ``meta.json``), ``tables/``
and ``report/``. Each stage reads what the earlier ones wrote, so any stage can
be rerun, and ``mxbench report`` rebuilds the tables and report from files.
"""
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import pandas as pd

from mxbench_train.errors import MxbenchError
from mxbench_train.launcher import RoleFailed
from mxbench_train.synthetic import VERSION as SYNTHETIC_VERSION
from mxbench_train.telemetry import read_gpu_csv, summarise as summarise_gpus

from . import config, launchers
from .metrics import NoSpeedLines, launcher_ratios, run_metrics, summarise
from .parse import parse_run_logs
from .variants import SYNTHETIC, Target, expand_runs, variant_from_dict


class RunFailed(RuntimeError):
    """A run that did not produce a measurement; its message names the run and the cause."""


def write_json(path: Path, data) -> None:
    """Write atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    tmp.replace(path)


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


# --- expand ---------------------------------------------------------------------------------

def targets_for(names) -> Dict[str, Target]:
    return {name: launchers.get(name).target() for name in names if name in launchers.LAUNCHERS}


def expand(params: dict, dag_dir: Path, targets: Dict[str, Target]) -> List[dict]:
    runs = expand_runs(params, targets)
    write_json(dag_dir / "request.json", {"params": params, "runs": runs,
                                          "targets": {k: vars(v) for k, v in targets.items()}})
    return runs


# --- prepare data ---------------------------------------------------------------------------

def _train_cli(*args) -> subprocess.CompletedProcess:
    # an argv list, never a shell: a dataset path from the trigger form cannot inject anything
    return subprocess.run([config.train_python(), "-m", "mxbench_train", *map(str, args)],
                          capture_output=True, text=True)


def _error_line(done: subprocess.CompletedProcess) -> str:
    lines = [l for l in done.stderr.splitlines() if l.startswith("error:")]
    return lines[-1][len("error: "):] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]


def synthetic_source(data_root: Path, images: int) -> Path:
    """Generated CIFAR-format data, made once per size and generator version, then reused."""
    folder = data_root / f"synthetic-v{SYNTHETIC_VERSION}-{images}"
    if (folder / "cifar-10-batches-py" / "test_batch").is_file():
        return folder / "cifar-10-batches-py"
    tmp = data_root / f".{folder.name}.{os.getpid()}"
    done = _train_cli("synthetic-cifar10", "--out", tmp, "--train", images, "--test", max(images // 5, 10))
    if done.returncode != 0:
        raise MxbenchError(f"synthetic CIFAR-10 generation failed: {_error_line(done)}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
    return folder / "cifar-10-batches-py"


def prepare_data(params: dict, dag_dir: Path, data_root: Path) -> dict:
    """CIFAR-10 -> RecordIO in the training env (cached there); ``data.json`` says what was used."""
    data_root.mkdir(parents=True, exist_ok=True)
    source = params.get("dataset", SYNTHETIC)
    synthetic = source == SYNTHETIC
    if synthetic:
        images = int(params.get("synthetic_images", 3000))
        source = synthetic_source(data_root, images)
        out = data_root / f"rec-{source.parent.name}"
    else:
        out = data_root / f"rec-{hashlib.sha1(source.encode()).hexdigest()[:12]}"
    flags = ["--allow-unverified"] if synthetic or params.get("allow_unverified") else []
    done = _train_cli("prepare-cifar10", "--source", source, "--out", out, *flags)
    if done.returncode != 0:
        raise MxbenchError(f"data preparation failed: {_error_line(done)}")
    manifest = json.loads(done.stdout)
    data = {"dir": str(out), "source": manifest["source"], "synthetic": manifest["synthetic"],
            "verified": manifest["verified"], "cache_hit": manifest["cache_hit"],
            "records": {k: v["records"] for k, v in manifest["splits"].items()}}
    write_json(dag_dir / "data.json", data)
    return data


# --- run ------------------------------------------------------------------------------------

def check_enough_data(variant, records: int):
    """Refuse a run whose workers would print no Speedometer line: it could measure nothing."""
    batches = records // variant.workers // variant.batch_size
    if batches <= variant.disp_batches:
        raise MxbenchError(
            f"each of its {variant.workers} workers gets {batches} batches of {variant.batch_size} per epoch "
            f"({records} training images), not more than --disp-batches {variant.disp_batches}: no speed "
            "would be measured; use more images or a smaller batch")


def run_one(run: dict, dag_dir: Path, data: dict, deadline_s: float) -> dict:
    """Execute one run; its folder keeps logs and ``meta.json`` whatever happens.

    A run that already succeeded is not run again (a retried or cleared task
    returns it as it was); a failed attempt's folder is kept under ``attempts/``.
    """
    run_dir = dag_dir / run["key"]
    meta = read_json(run_dir / "meta.json", {})
    if meta.get("status") == "ok":
        return {**summary_of(meta), "reused": True}
    if run_dir.exists():
        n = len(list((dag_dir / "attempts").glob(f"{run['key']}.*"))) + 1
        (dag_dir / "attempts").mkdir(exist_ok=True)
        run_dir.replace(dag_dir / "attempts" / f"{run['key']}.{n}")
    run_dir.mkdir(parents=True)
    variant = variant_from_dict(run["variant"])
    launcher = launchers.get(run["launcher"])
    meta = {"key": run["key"], "variant": run["variant"], "launcher": run["launcher"], "repeat": run["repeat"],
            "data_dir": data["dir"], "status": "running", "started_at": time.time()}
    write_json(run_dir / "meta.json", meta)
    try:
        check_enough_data(variant, data["records"]["train"])
        _, results = launcher.execute(variant, data["dir"], run_dir, deadline_s)
        meta.update(status="ok", cause=None, roles=[vars(r) for r in results],
                    # first role's start to last role's exit: the trainer processes' own wall time
                    trainer_wall_s=max(r.start_s + (r.wall_s or 0) for r in results))
    except RoleFailed as exc:
        meta.update(status="failed", cause=str(exc), failed_role=exc.role.name, exit_status=exc.status)
    except MxbenchError as exc:
        meta.update(status="failed", cause=str(exc))
    except Exception as exc:  # a launcher bug still leaves a record of the run
        meta.update(status="failed", cause=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        meta["command"] = _command_from_plan(run_dir)  # the launcher wrote plan.json, if it got that far
        meta["ended_at"] = time.time()
        meta["duration_s"] = round(meta["ended_at"] - meta["started_at"], 3)
        write_json(run_dir / "meta.json", meta)
    if meta["status"] != "ok":
        raise RunFailed(f"run {run['key']} failed: {meta['cause']}")
    return summary_of(meta)


def _command_from_plan(run_dir: Path):
    plan = read_json(run_dir / "plan.json", [])
    worker = next((r for r in plan if r["kind"] == "worker"), None)
    return shlex.join(worker["argv"]) if worker else None


def summary_of(meta: dict) -> dict:
    return {k: meta.get(k) for k in ("key", "launcher", "repeat", "status", "cause", "duration_s",
                                      "trainer_wall_s")}


# --- parse ----------------------------------------------------------------------------------

def gpu_usage(run_dir: Path) -> dict:
    """Mean utilisation over the run's GPUs and the most memory any of them used, from telemetry."""
    rows = [row for csv_path in sorted(run_dir.glob("gpu-rank*.csv")) for row in read_gpu_csv(csv_path)]
    if not rows:
        return {"gpu_util_pct": None, "gpu_mem_mib": None}
    per_gpu = summarise_gpus(rows)
    return {"gpu_util_pct": sum(g["utilization_mean_pct"] for g in per_gpu) / len(per_gpu),
            "gpu_mem_mib": max(g["memory_used_max_mib"] for g in per_gpu)}


def parse_run(run: dict, dag_dir: Path):
    """(row for the runs table, tidy speed rows, tidy epoch rows) of one run."""
    run_dir = dag_dir / run["key"]
    variant = variant_from_dict(run["variant"])
    meta = read_json(run_dir / "meta.json")
    row = {"key": run["key"], "variant": variant.id, "setup": variant.setup, "launcher": run["launcher"],
           "repeat": run["repeat"], "num_layers": variant.num_layers, "devices": variant.devices,
           "workers": variant.workers, "batch_size": variant.batch_size,
           "batch_per_device": variant.batch_per_device, "status": "not run",
           "cause": "the run never started (an upstream task failed)",
           "samples_per_sec": None, "sec_per_epoch": None, "first_epoch_s": None, "validation_accuracy": None,
           "gpu_util_pct": None, "gpu_mem_mib": None, "p2p_pairs": None, "duration_s": None,
           "trainer_wall_s": None}
    logs = sorted(run_dir.glob("rank*.log")) or sorted(run_dir.glob("roles/worker-*.log"))
    parsed = parse_run_logs(logs)
    tag = {"key": run["key"], "variant": variant.id, "launcher": run["launcher"], "repeat": run["repeat"]}
    speed, epochs = parsed.speed.assign(**tag), parsed.epochs.assign(**tag)
    if meta is None:
        return row, speed, epochs
    row.update(status=meta["status"], cause=meta.get("cause"), duration_s=meta.get("duration_s"),
               trainer_wall_s=meta.get("trainer_wall_s"))
    if meta["status"] == "running":
        row.update(status="failed", cause="the run was interrupted (its task died mid-run)")
    if row["status"] == "ok":
        try:
            metrics = run_metrics(parsed, f"run {run['key']}")
        except NoSpeedLines as exc:
            row.update(status="failed", cause=f"parse: {exc}")
        else:
            row.update({k: metrics[k] for k in ("samples_per_sec", "sec_per_epoch", "first_epoch_s",
                                                "validation_accuracy")})
            row.update(gpu_usage(run_dir))
            if metrics["p2p"]:
                row["p2p_pairs"] = f"{metrics['p2p']['enabled_pairs']}/{metrics['p2p']['total_pairs']}"
            start = next((e for e in parsed.events if e.get("event") == "run_start"), {})
            write_json(run_dir / "metrics.json", {**metrics, "environment": start.get("environment")})
    return row, speed, epochs


def parse_all(dag_dir: Path) -> Dict[str, str]:
    """Tidy tables of every run in the request: ``tables/{runs,speed,epochs}.csv``."""
    request = read_json(dag_dir / "request.json")
    if request is None:
        raise MxbenchError(f"{dag_dir} has no request.json: not a benchmark run folder")
    rows, speeds, epochs = [], [], []
    for run in request["runs"]:
        row, speed, epoch = parse_run(run, dag_dir)
        rows.append(row)
        speeds.append(speed)
        epochs.append(epoch)
    tables = dag_dir / "tables"
    tables.mkdir(exist_ok=True)
    pd.DataFrame(rows).to_csv(tables / "runs.csv", index=False)
    pd.concat(speeds, ignore_index=True).to_csv(tables / "speed.csv", index=False)
    pd.concat(epochs, ignore_index=True).to_csv(tables / "epochs.csv", index=False)
    return {name: str(tables / f"{name}.csv") for name in ("runs", "speed", "epochs")}


# --- join -----------------------------------------------------------------------------------

def load_table(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def join(dag_dir: Path) -> Dict[str, str]:
    """``tables/summary.csv`` (the seed-style table) and ``tables/ratios.csv`` (launcher ratios)."""
    runs = load_table(dag_dir / "tables" / "runs.csv")
    summarise(runs).to_csv(dag_dir / "tables" / "summary.csv", index=False)
    launcher_ratios(runs).to_csv(dag_dir / "tables" / "ratios.csv", index=False)
    return {name: str(dag_dir / "tables" / f"{name}.csv") for name in ("summary", "ratios")}


def failures(dag_dir: Path) -> List[dict]:
    runs = load_table(dag_dir / "tables" / "runs.csv")
    if runs.empty:
        return []
    return runs.loc[runs["status"] != "ok", ["key", "status", "cause"]].to_dict("records")

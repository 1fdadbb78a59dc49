"""Recording DAG runs in the results store: ``record_dag_run`` stores one from its folder,
``import_runs`` folders made before the store existed (``results.machines.fingerprint`` names the kind
of machine its environments are keyed by)."""
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, List, Optional

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from mxbench.matrix.variants import launcher_of, leg, measured_setup
from mxbench.results import convergence
from mxbench.results.machines import fingerprint
from mxbench.run_folder import DagRunFolder, load_table, read_json
from mxbench.store.database import ready_engine
from mxbench.store.schema import dag_runs, environments, repeats, utcnow, variants
from mxbench.store.store_errors import StoreError

TRIGGERS = ("manual", "scheduled", "backfill")
VARIANT_COLUMNS = [c.name for c in variants.columns if c.name != "id"]
# runs.csv columns copied as they are into a repeat row
MEASURES = ("samples_per_sec", "epoch_samples_per_sec", "sec_per_epoch", "validation_accuracy",
            "gpu_util_pct", "gpu_mem_mib", "duration_s", "cpu_pressure", "steal", "foreign_cores",
            "run_pressure", "canary_s", "link_bits", "link_bytes_per_step")
# runs.csv columns saying what a run ran on (revision 0004): read as text, or "1.10" would become 1.1
RUN_BUILD_COLUMNS = ("mxnet_asked", "mxnet_reported", "runtime")
KUBERNETES = "kubernetes"  # the launcher whose runs' runtime is an image


def db_value(value):
    """A CSV cell as the database takes it: NaN -> None, numpy scalars -> Python."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def utc_time(value) -> Optional[datetime]:
    """Epoch seconds (meta.json, runs.csv), a datetime or an ISO string -> aware UTC datetime."""
    value = db_value(value)
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _variant_row(definition: dict, csv_row: Optional[dict] = None) -> dict:
    """A variants row from the request's variant dict (or, for a run the request lacks, its CSV row)."""
    source = dict(csv_row or {})
    if definition:
        gpus = definition.get("gpus_per_worker", 0)
        workers = definition.get("workers", 1)
        source = {**definition, "devices": workers * max(1, gpus),
                  "batch_per_device": definition["batch_size"] // max(1, gpus)}
    return {"id": definition.get("id") or source["variant"],
            **{c: db_value(source.get(c)) for c in VARIANT_COLUMNS}}


def _upsert(connection, table, rows: List[dict], key: str, update: bool) -> None:
    """Insert rows; one already there (by ``key``) is updated, or left as it is."""
    if not rows:
        return
    dialect = connection.dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(table)
        columns = [c for c in rows[0] if c != key]
        statement = (insert.on_conflict_do_update(index_elements=[key],
                                                  set_={c: insert.excluded[c] for c in columns})
                     if update else insert.on_conflict_do_nothing(index_elements=[key]))
        connection.execute(statement, rows)
        return
    for row in rows:  # other backends: not safe against a concurrent writer, but correct alone
        exists = connection.execute(sa.select(table.c[key]).where(table.c[key] == row[key])).first()
        if not exists:
            connection.execute(table.insert(), row)
        elif update:
            connection.execute(table.update().where(table.c[key] == row[key]), row)


def _read_runs_csv(path: Path) -> List[dict]:
    if not path.is_file():
        return []
    try:
        table = pd.read_csv(path, dtype={column: str for column in RUN_BUILD_COLUMNS})
    except pd.errors.EmptyDataError:
        return []
    return [{k: db_value(v) for k, v in row.items()} for row in table.to_dict("records")]


def record_dag_run(url: str, dag_folder: DagRunFolder, *, dag_id: str, run_id: str, trigger: str,
                   build: Optional[dict] = None, logical_date=None, data_interval=None,
                   folder: Optional[str] = None) -> dict:
    """Store one DAG run from its folder, replacing whatever was stored for ``run_id`` of ``dag_id``
    (one transaction: a rerun task or DAG run never duplicates, and a reader never sees half of
    one; another DAG's run of the same id is left alone).

    Every run of ``request.json`` becomes a repeat row: measured, failed (with its cause) or, when
    ``tables/runs.csv`` lacks it, "not run". ``build``: the build asked for, ``{"package", "commit",
    ...}``; None: request.json's ``build``, if any. Each repeat's build asked for, MXNet version
    reported and runtime (interpreter or image) come from runs.csv; a folder older than those
    columns gives the DAG run's ``build`` package and the run's metrics.json version instead, and
    no runtime. The DAG run's ``image`` is the image its Kubernetes runs used, None where no run
    used one (a build's ``image`` says what a Kubernetes run would use, not that one ran).
    ``folder``: where the DAG run's files live, as recorded (default: ``dag_folder``'s path; the
    artifact store's URL of it when ``dag_folder`` is a task's scratch copy).
    Returns ``{"dag_id", "run_id", "repeats", "fingerprint"}`` (the first measured run's machine),
    ``"fingerprints"``: launcher -> its runs' machine, and the night it stands for: ``"trigger"``,
    ``"logical_date"`` and ``"data_interval"`` (ISO times, None where it has none).
    """
    if trigger not in TRIGGERS:
        raise StoreError(f"trigger must be one of {', '.join(TRIGGERS)}, not {trigger!r}")
    request = read_json(dag_folder.request)
    csv_rows = _read_runs_csv(dag_folder.table("runs"))
    if request is None and not csv_rows:
        raise StoreError(f"{dag_folder.path} has neither request.json nor tables/runs.csv: not a benchmark run folder")
    request = request or {}
    machine_set_of = {launcher: name for name, members in (request.get("machine_sets") or {}).items()
                      for launcher in members}
    build = build or request.get("build") or {}  # the regression DAG's expand writes it there
    to_target = _times_to_target(dag_folder, csv_rows, request.get("params") or {})

    # the request's runs in its order, then any the table has that the request does not
    by_key = {row["key"]: row for row in csv_rows}
    planned = {run["key"]: run for run in request.get("runs", [])}
    keys = list(planned) + [key for key in by_key if key not in planned]

    variant_rows, environment_rows, repeat_rows = {}, {}, []
    for key in keys:
        run, row = planned.get(key, {}), by_key.get(key)
        variant = _variant_row(run.get("variant") or {}, row)
        variant_rows.setdefault(variant["id"], variant)
        status = (row or {}).get("status") or "not run"
        env_fingerprint = None
        environment = ((read_json(dag_folder.run(key).metrics) or {}).get("environment")
                       if status == "ok" else None)
        if environment:
            env_fingerprint, facts = fingerprint(environment)
            environment_rows.setdefault(env_fingerprint, {"facts": facts, "environment": environment,
                                                          "first_seen": utc_time((row or {}).get("started_at"))})
        launcher = leg(run) if run else row["launcher"]  # an A/A calibration's arm b: "local-b"
        repeat_rows.append({
            "dag_id": dag_id, "dag_run": run_id, "run_key": key, "variant": variant["id"], "launcher": launcher,
            "machine_set": machine_set_of.get(run.get("launcher") or launcher_of(launcher)),
            "repeat": int(run.get("repeat") or row["repeat"]),
            "environment": env_fingerprint, "status": status,
            "cause": (row or {}).get("cause") if row else "the run never started: tables/runs.csv has no row for it",
            **{m: (row or {}).get(m) for m in MEASURES},
            "contended": None if db_value((row or {}).get("contended")) is None else bool((row or {})["contended"]),
            "started_at": utc_time((row or {}).get("started_at")), "ended_at": utc_time((row or {}).get("ended_at")),
            "mxnet_asked": (row or {}).get("mxnet_asked") or build.get("package"),
            "mxnet_reported": (row or {}).get("mxnet_reported") or (environment or {}).get("mxnet_version"),
            "runtime": (row or {}).get("runtime"),
            # what it measured; a run the request lacks cannot say (its CSV row has no epochs): no key
            "setup_key": measured_setup(run["variant"], request.get("params") or {}) if run.get("variant") else None,
            **to_target.get(key, {"target_accuracy": None, "time_to_target_s": None}),
        })

    now = utcnow()
    starts = [r["started_at"] for r in repeat_rows if r["started_at"]]
    ends = [r["ended_at"] for r in repeat_rows if r["ended_at"]]
    logical = utc_time(logical_date)
    first_env = next(iter(environment_rows.values()), None)
    runs_ok = sum(r["status"] == "ok" for r in repeat_rows)
    runs_failed = sum(r["status"] not in ("ok", "skipped") for r in repeat_rows)  # skipped: not needed
    interval = tuple(map(utc_time, data_interval)) if data_interval else (None, None)
    images = [r["runtime"] for r in repeat_rows if r["launcher"] == KUBERNETES and r["runtime"]]
    dag_run_row = {
        "run_id": run_id, "dag_id": dag_id, "trigger": trigger, "logical_date": logical,
        "data_interval_start": interval[0], "data_interval_end": interval[1],
        "measured_at": logical or (min(starts) if starts else now),
        "mxnet_version": (first_env or {}).get("environment", {}).get("mxnet_version"),
        "mxnet_package": build.get("package"), "mxnet_commit": build.get("commit"),
        "image": images[0] if images else None,  # one DAG run's pods share its one image
        "preset": (request.get("params") or {}).get("preset"), "params": request.get("params"),
        "folder": folder or str(dag_folder.path.resolve()), "started_at": min(starts) if starts else None,
        "ended_at": max(ends) if ends else None,
        "state": "ok" if runs_ok and not runs_failed else "failed",
        "runs_ok": runs_ok, "runs_failed": runs_failed,
        "environment": next(iter(environment_rows), None), "recorded_at": now,
    }

    with ready_engine(url).begin() as connection:
        _upsert(connection, variants, list(variant_rows.values()), "id", update=True)
        _upsert(connection, environments, [
            {"fingerprint": fp, **e["facts"], "first_seen": e["first_seen"] or now}
            for fp, e in environment_rows.items()], "fingerprint", update=False)
        for fp, e in environment_rows.items():  # an older run imported later moves first_seen back
            if e["first_seen"]:
                connection.execute(environments.update().where(
                    (environments.c.fingerprint == fp) & (environments.c.first_seen > e["first_seen"])
                ).values(first_seen=e["first_seen"]))
        # this DAG run's earlier record, and an import of this folder under its folder name
        replaced = (((dag_runs.c.dag_id == dag_id) & (dag_runs.c.run_id == run_id))
                    | (dag_runs.c.folder == dag_run_row["folder"]))
        connection.execute(repeats.delete().where(sa.exists().where(
            replaced & (dag_runs.c.dag_id == repeats.c.dag_id) & (dag_runs.c.run_id == repeats.c.dag_run))))
        connection.execute(dag_runs.delete().where(replaced))
        connection.execute(dag_runs.insert(), dag_run_row)
        if repeat_rows:
            connection.execute(repeats.insert(), repeat_rows)
    # each launcher's own machine: ssh hosts or Kubernetes nodes need not be the local one
    by_launcher = {}
    for row in repeat_rows:
        if row["environment"]:
            by_launcher.setdefault(row["launcher"], row["environment"])
    # the night it stands for, for the report's title (stored.json)
    night = {"trigger": trigger, "logical_date": logical.isoformat() if logical else None,
             "data_interval": [t.isoformat() for t in interval] if all(interval) else None}
    return {"dag_id": dag_id, "run_id": run_id, "repeats": len(repeat_rows),
            "fingerprint": dag_run_row["environment"], "fingerprints": by_launcher, **night}


def _times_to_target(dag_folder: DagRunFolder, csv_rows: List[dict], params: dict) -> dict:
    """Run key -> its ``target_accuracy`` and ``time_to_target_s`` (revision 0005), from
    ``tables/epochs.csv``; empty when the preset has no target (both columns then stay NULL)."""
    target = convergence.target_for(params)
    if target is None or not csv_rows:
        return {}
    times = convergence.run_times(pd.DataFrame(csv_rows), load_table(dag_folder.table("epochs")), target)
    return {row["key"]: {"target_accuracy": target, "time_to_target_s": db_value(row["time_to_target_s"])}
            for row in times.to_dict("records")}


def import_runs(url: str, dag_dirs: Iterable) -> List[dict]:
    """Record run folders made before the store existed (``$MXBENCH_HOME/runs/*``), as manual
    runs of the DAG their request.json names (``mxbench_benchmark`` where it names none: folders
    older than that field were all its). One result per folder: ``record_dag_run``'s, or
    ``{"folder", "skipped": why}`` for a folder without ``tables/runs.csv``."""
    results = []
    for dag_dir in map(Path, dag_dirs):
        dag_folder = DagRunFolder(dag_dir)
        if not dag_folder.table("runs").is_file():
            results.append({"folder": str(dag_dir),
                            "skipped": f"{dag_dir} has no tables/runs.csv (its runs were never parsed): skipped"})
            continue
        request = read_json(dag_folder.request) or {}
        recorded = _recorded_run_of(url, dag_folder)
        if recorded and recorded["trigger"] != "manual":
            # the DAG recorded it itself, knowing more (trigger, dates): keep that
            results.append({"folder": str(dag_dir),
                            "skipped": f"{dag_dir} is already recorded as {recorded['run_id']}"})
            continue
        run_id = request.get("run_id") or (recorded or {}).get("run_id") or dag_dir.name
        dag_id = request.get("dag_id") or (recorded or {}).get("dag_id") or "mxbench_benchmark"
        results.append({"folder": str(dag_dir), **record_dag_run(
            url, dag_folder, dag_id=dag_id, run_id=run_id, trigger="manual")})
    return results


def _recorded_run_of(url: str, dag_folder: DagRunFolder) -> Optional[dict]:
    with ready_engine(url).connect() as connection:
        row = connection.execute(sa.select(dag_runs.c.dag_id, dag_runs.c.run_id, dag_runs.c.trigger)
                                 .where(dag_runs.c.folder == str(dag_folder.path.resolve()))).first()
    return dict(row._mapping) if row else None

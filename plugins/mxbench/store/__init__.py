"""The results store: every DAG run's measurements, kept across runs, behind SQLAlchemy.

A SQLite file ``$MXBENCH_HOME/results.db`` by default; ``MXBENCH_RESULTS_URL`` (any SQLAlchemy
URL, e.g. ``postgresql+psycopg2://user@host/db``) overrides it. The schema is made and upgraded
by the Alembic migrations in ``migrations/`` (``migrate``); every other call migrates first, once
per process, so a fresh or older database just works.

No Airflow here: the DAG passes in what it knows (run id, trigger, dates), the rest is read from
the DAG run's folder as the pipeline leaves it after ``join_results``.
"""
import contextlib
import hashlib
import json
import math
import os
import re
import urllib.parse
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple, Union

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from .. import config
from .schema import dag_runs, environments, metadata, repeats, utcnow, variants

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
URL_ENV = "MXBENCH_RESULTS_URL"
TRIGGERS = ("manual", "scheduled", "backfill")
VARIANT_COLUMNS = [c.name for c in variants.columns if c.name != "id"]
# runs.csv columns copied as they are into a repeat row
MEASURES = ("samples_per_sec", "epoch_samples_per_sec", "sec_per_epoch", "validation_accuracy",
            "gpu_util_pct", "gpu_mem_mib", "duration_s")
# runs.csv columns saying what a run ran on (revision 0004): read as text, or "1.10" would become 1.1
RUN_BUILD_COLUMNS = ("mxnet_asked", "mxnet_reported", "runtime")
KUBERNETES = "kubernetes"  # the launcher whose runs' runtime is an image


class StoreError(RuntimeError):
    """Something the store cannot do, said in one line."""


# --- where and how ----------------------------------------------------------------------------

def default_url() -> str:
    return os.environ.get(URL_ENV) or f"sqlite:///{config.home() / 'results.db'}"


def url_of_connection(uri: str) -> str:
    """An Airflow connection URI as SQLAlchemy takes it: ``postgres://`` (Airflow's spelling) and
    ``postgresql://`` become ``postgresql+psycopg2://``; Airflow's ``__extra__`` query is dropped."""
    try:
        url = sa.engine.make_url(uri)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results connection's URI is not a database URL: {UNSHOWN}") from None
    if url.drivername in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg2")
    return url.difference_update_query(["__extra__"]).render_as_string(hide_password=False)


UNSHOWN = "it is not shown, since it may hold a password"


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return f"<an invalid URL: {UNSHOWN}>"


# a password shorter than this is redacted only where it stands as a password (in a URL's
# userinfo, after "password="): anywhere else it is likely a plain part of the message ("a")
BARE_PASSWORD_MIN = 8


def without_password(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` and its password nowhere in it: for messages
    that quote what a driver or another library said about the URL. The password goes where it
    stands as one (``user:<password>@``, ``password=<password>``), in any of its spellings (as is,
    percent-encoded); elsewhere too when it is long enough to mean nothing else."""
    text = text.replace(url, shown(url))
    try:
        password = sa.engine.make_url(url).password
    except (sa.exc.ArgumentError, ValueError):
        password = None
    if not password:
        return text
    spellings = sorted({password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)},
                       key=len, reverse=True)
    for spelling in spellings:
        quoted = re.escape(spelling)
        text = re.sub(rf"(://[^\s/@:]*:){quoted}@", r"\1***@", text)
        text = re.sub(rf"(password[\s=:]+['\"]?){quoted}(?=$|[\s'\",;)\]}}])", r"\1***", text,
                      flags=re.IGNORECASE)
        if len(password) >= BARE_PASSWORD_MIN:
            text = text.replace(spelling, "***")
    return text


def safe_error(exc: BaseException, url: Optional[str]) -> BaseException:
    """``exc``, or, where its message or one in its chain quotes ``url`` or its password (a
    driver's may), a StoreError with its message redacted and no chain: a task log shows the whole
    chain."""
    if not url:
        return exc
    chain, link = [], exc
    while link is not None and all(link is not seen for seen, _ in chain):  # a chain may loop
        chain.append((link, f"{type(link).__name__}: {link}"))
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    chain = [told for _, told in chain]
    if all(without_password(told, url) == told for told in chain):
        return exc
    return StoreError(without_password(chain[0], url))


@contextlib.contextmanager
def errors_without_password(url: Optional[str]) -> Iterator[None]:
    """Within the block, an error that quotes ``url``'s password is raised as ``safe_error``'s
    StoreError instead: for tasks that hand the URL to the store (or anything else)."""
    try:
        yield
    except Exception as exc:
        safe = safe_error(exc, url)
        if safe is exc:
            raise
        raise safe from None


def engine_name(url: str) -> str:
    """The kind of database only (sqlite, postgresql), for pages that must not show where it is."""
    try:
        return sa.engine.make_url(url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError):
        return "an invalid URL"


@lru_cache(maxsize=None)
def engine(url: str) -> sa.engine.Engine:
    """One engine per URL for the process (its pool makes repeated queries cheap)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results store's URL is not a database URL ({UNSHOWN})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    try:
        made = sa.create_engine(parsed)
    except Exception as exc:  # an unknown dialect or a missing driver
        raise StoreError(without_password(f"cannot use the results store at {shown(url)}: {exc}", url)) from None
    if parsed.get_backend_name() == "sqlite":
        @sa.event.listens_for(made, "connect")
        def _enforce_foreign_keys(dbapi_connection, _record):  # SQLite ignores them unless asked
            dbapi_connection.execute("PRAGMA foreign_keys=ON")
    return made


def _alembic_config(connection=None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(url: str) -> str:
    """Upgrade the database to the newest revision (nothing to do if it is there); that revision."""
    from alembic import command
    from alembic.script import ScriptDirectory

    cfg = _alembic_config()
    try:
        with engine(url).begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    except sa.exc.OperationalError as exc:
        raise StoreError(without_password(f"cannot reach the results store at {shown(url)}: {_first_line(exc)}",
                                          url)) from None
    return ScriptDirectory.from_config(cfg).get_current_head()


@lru_cache(maxsize=None)
def _ready(url: str) -> sa.engine.Engine:
    migrate(url)
    return engine(url)


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- hardware -----------------------------------------------------------------------------------

def fingerprint(environment: dict) -> Tuple[str, dict]:
    """(fingerprint, facts) of a run's ``environment`` (its metrics.json): the hardware a number
    depends on. Host name, Python and MXNet are left out: two identical machines are one kind, and
    the MXNet version is what a history compares."""
    gpu = environment.get("gpu") or {}
    names = [g.get("name") for g in gpu.get("gpus") or []] if gpu.get("available") else []
    facts = {"gpu_model": " + ".join(sorted(set(filter(None, names)))) or None, "gpu_count": len(names),
             "driver": gpu.get("driver") if names else None, "cuda": gpu.get("cuda") if names else None,
             "cpu_model": environment.get("cpu_model"), "cpu_count": environment.get("cpu_count")}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    host_class = (f"gpu: {facts['gpu_count']}x {facts['gpu_model']}" if names
                  else f"cpu: {facts['cpu_model'] or 'unknown'} x{facts['cpu_count'] or '?'}")
    return digest, {**facts, "host_class": host_class}


# --- recording a DAG run ------------------------------------------------------------------------

def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _clean(value):
    """A CSV cell as the database takes it: NaN -> None, numpy scalars -> Python."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _time(value) -> Optional[datetime]:
    """Epoch seconds (meta.json, runs.csv), a datetime or an ISO string -> aware UTC datetime."""
    value = _clean(value)
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
            **{c: _clean(source.get(c)) for c in VARIANT_COLUMNS}}


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
    return [{k: _clean(v) for k, v in row.items()} for row in table.to_dict("records")]


def record_dag_run(url: str, dag_dir, *, dag_id: str, run_id: str, trigger: str, build: Optional[dict] = None,
                   logical_date=None, data_interval=None, folder: Optional[str] = None) -> dict:
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
    ``folder``: where the DAG run's files live, as recorded (default: ``dag_dir``; the artifact
    store's URL of it when ``dag_dir`` is a task's scratch copy).
    Returns ``{"dag_id", "run_id", "repeats", "fingerprint"}`` (the first measured run's machine)
    and ``"fingerprints"``: launcher -> its runs' machine.
    """
    dag_dir = Path(dag_dir)
    if trigger not in TRIGGERS:
        raise StoreError(f"trigger must be one of {', '.join(TRIGGERS)}, not {trigger!r}")
    request = _read_json(dag_dir / "request.json")
    csv_rows = _read_runs_csv(dag_dir / "tables" / "runs.csv")
    if request is None and not csv_rows:
        raise StoreError(f"{dag_dir} has neither request.json nor tables/runs.csv: not a benchmark run folder")
    request = request or {}
    machine_set_of = {launcher: name for name, members in (request.get("machine_sets") or {}).items()
                      for launcher in members}
    build = build or request.get("build") or {}  # the regression DAG's expand writes it there

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
        environment = ((_read_json(dag_dir / key / "metrics.json") or {}).get("environment")
                       if status == "ok" else None)
        if environment:
            env_fingerprint, facts = fingerprint(environment)
            environment_rows.setdefault(env_fingerprint, {"facts": facts, "environment": environment,
                                                          "first_seen": _time((row or {}).get("started_at"))})
        launcher = run.get("launcher") or row["launcher"]
        repeat_rows.append({
            "dag_id": dag_id, "dag_run": run_id, "run_key": key, "variant": variant["id"], "launcher": launcher,
            "machine_set": machine_set_of.get(launcher), "repeat": int(run.get("repeat") or row["repeat"]),
            "environment": env_fingerprint, "status": status,
            "cause": (row or {}).get("cause") if row else "the run never started: tables/runs.csv has no row for it",
            **{m: (row or {}).get(m) for m in MEASURES},
            "started_at": _time((row or {}).get("started_at")), "ended_at": _time((row or {}).get("ended_at")),
            "mxnet_asked": (row or {}).get("mxnet_asked") or build.get("package"),
            "mxnet_reported": (row or {}).get("mxnet_reported") or (environment or {}).get("mxnet_version"),
            "runtime": (row or {}).get("runtime"),
        })

    now = utcnow()
    starts = [r["started_at"] for r in repeat_rows if r["started_at"]]
    ends = [r["ended_at"] for r in repeat_rows if r["ended_at"]]
    logical = _time(logical_date)
    first_env = next(iter(environment_rows.values()), None)
    runs_ok = sum(r["status"] == "ok" for r in repeat_rows)
    interval = tuple(map(_time, data_interval)) if data_interval else (None, None)
    images = [r["runtime"] for r in repeat_rows if r["launcher"] == KUBERNETES and r["runtime"]]
    dag_run_row = {
        "run_id": run_id, "dag_id": dag_id, "trigger": trigger, "logical_date": logical,
        "data_interval_start": interval[0], "data_interval_end": interval[1],
        "measured_at": logical or (min(starts) if starts else now),
        "mxnet_version": (first_env or {}).get("environment", {}).get("mxnet_version"),
        "mxnet_package": build.get("package"), "mxnet_commit": build.get("commit"),
        "image": images[0] if images else None,  # one DAG run's pods share its one image
        "preset": (request.get("params") or {}).get("preset"), "params": request.get("params"),
        "folder": folder or str(dag_dir.resolve()), "started_at": min(starts) if starts else None,
        "ended_at": max(ends) if ends else None,
        "state": "ok" if repeat_rows and runs_ok == len(repeat_rows) else "failed",
        "runs_ok": runs_ok, "runs_failed": len(repeat_rows) - runs_ok,
        "environment": next(iter(environment_rows), None), "recorded_at": now,
    }

    with _ready(url).begin() as connection:
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
    return {"dag_id": dag_id, "run_id": run_id, "repeats": len(repeat_rows),
            "fingerprint": dag_run_row["environment"], "fingerprints": by_launcher}


def import_runs(url: str, dag_dirs: Iterable) -> List[dict]:
    """Record run folders made before the store existed (``$MXBENCH_HOME/runs/*``), as manual
    runs of the DAG their request.json names (``mxbench_benchmark`` where it names none: folders
    older than that field were all its). One result per folder: ``record_dag_run``'s, or
    ``{"folder", "skipped": why}`` for a folder without ``tables/runs.csv``."""
    results = []
    for dag_dir in map(Path, dag_dirs):
        if not (dag_dir / "tables" / "runs.csv").is_file():
            results.append({"folder": str(dag_dir),
                            "skipped": f"{dag_dir} has no tables/runs.csv (its runs were never parsed): skipped"})
            continue
        request = _read_json(dag_dir / "request.json") or {}
        recorded = _recorded_run_of(url, dag_dir)
        if recorded and recorded["trigger"] != "manual":
            # the DAG recorded it itself, knowing more (trigger, dates): keep that
            results.append({"folder": str(dag_dir), "skipped": f"{dag_dir} is already recorded as {recorded['run_id']}"})
            continue
        run_id = request.get("run_id") or (recorded or {}).get("run_id") or dag_dir.name
        dag_id = request.get("dag_id") or (recorded or {}).get("dag_id") or "mxbench_benchmark"
        results.append({"folder": str(dag_dir), **record_dag_run(
            url, dag_dir, dag_id=dag_id, run_id=run_id, trigger="manual")})
    return results


def _recorded_run_of(url: str, dag_dir: Path) -> Optional[dict]:
    with _ready(url).connect() as connection:
        row = connection.execute(sa.select(dag_runs.c.dag_id, dag_runs.c.run_id, dag_runs.c.trigger)
                                 .where(dag_runs.c.folder == str(dag_dir.resolve()))).first()
    return dict(row._mapping) if row else None


# --- reading ------------------------------------------------------------------------------------

HISTORY_COLUMNS = [dag_runs.c.measured_at, dag_runs.c.logical_date, dag_runs.c.started_at,
                   dag_runs.c.run_id, dag_runs.c.dag_id, dag_runs.c.trigger, dag_runs.c.mxnet_version,
                   dag_runs.c.mxnet_package, dag_runs.c.mxnet_commit, repeats.c.mxnet_asked, repeats.c.mxnet_reported,
                   repeats.c.runtime, repeats.c.variant, repeats.c.launcher, repeats.c.repeat,
                   repeats.c.environment, repeats.c.status, repeats.c.cause, repeats.c.samples_per_sec,
                   repeats.c.sec_per_epoch]
# what a repeat ran, best source first: its trainer's own report (revision 0004), its DAG run's
# first measured run's, the package asked for
WHAT_RAN_SOURCES = ("mxnet_reported", "mxnet_version", "mxnet_package")


def what_ran(rows: pd.DataFrame) -> pd.Series:
    """Each history row's MXNet build as it ran, the ``build`` that histories and the step finder
    group by: the first of ``WHAT_RAN_SOURCES`` the row has, else "unknown". A source column the
    rows lack (a ``history.csv`` written before revision 0004) is passed over."""
    ran = pd.Series(None, index=rows.index, dtype=object)
    for column in WHAT_RAN_SOURCES:
        if column in rows.columns:
            ran = ran.fillna(rows[column].astype(object))
    return ran.fillna("unknown")


def _frame(connection, query) -> pd.DataFrame:
    """The query's rows, with ``build`` (``what_ran``)."""
    result = connection.execute(query)
    rows = pd.DataFrame(result.fetchall(), columns=list(result.keys()))
    return rows.assign(build=what_ran(rows))


OF_ITS_DAG_RUN = (repeats.c.dag_id == dag_runs.c.dag_id) & (repeats.c.dag_run == dag_runs.c.run_id)


def _history_query(variant=None, launcher=None, fingerprint=None, dag_ids=None, columns=HISTORY_COLUMNS):
    query = (sa.select(*columns).join(dag_runs, OF_ITS_DAG_RUN)
             .order_by(dag_runs.c.measured_at, dag_runs.c.dag_id, dag_runs.c.run_id, repeats.c.variant,
                       repeats.c.launcher, repeats.c.repeat))
    if variant:
        query = query.where(repeats.c.variant == variant)
    if dag_ids is not None:
        query = query.where(dag_runs.c.dag_id.in_(list(dag_ids)))
    if launcher:
        query = query.where(repeats.c.launcher == launcher)
    if fingerprint:
        query = query.where(repeats.c.environment == fingerprint)
    return query


def history(url: str, variant: Optional[str] = None, launcher: Optional[str] = None,
            fingerprint: Optional[str] = None, dag_ids: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """Every repeat of ``variant`` (or of every variant; optionally one launcher, one kind of
    machine, the DAG runs of some DAGs), oldest first, with its DAG run's time, trigger and MXNet
    build asked for, and its own: build asked for, version reported, runtime, and ``build``, what
    ran (``what_ran``)."""
    with _ready(url).connect() as connection:
        return _frame(connection, _history_query(variant, launcher, fingerprint, dag_ids))


def read_history(url: str) -> pd.DataFrame:
    """``history`` of every variant for a reader (the UI's history page): it never creates or
    upgrades the database; one that is not there yet, or has no tables yet, has no history, and
    one at an older revision reads the columns it lacks as NULL."""
    empty = pd.DataFrame(columns=[c.name for c in HISTORY_COLUMNS] + ["build"])
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results store's URL is not a database URL ({UNSHOWN})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(parsed.database).is_file():
        return empty
    try:
        with engine(url).connect() as connection:
            inspector = sa.inspect(connection)
            if not inspector.has_table("repeats"):
                return empty
            # the api-server may run this code before any store task has upgraded the database
            stored = {c["name"] for c in inspector.get_columns("repeats")}
            columns = [c if c.table is not repeats or c.name in stored else sa.null().label(c.name)
                       for c in HISTORY_COLUMNS]
            return _frame(connection, _history_query(columns=columns))
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(without_password(_first_line(exc), url)) from None


def baseline(url: str, variant: str, launcher: str, fingerprint: str, before: Union[datetime, Tuple[str, str]],
             runs: int = 5) -> pd.DataFrame:
    """The successful repeats of ``variant`` on ``launcher`` and this kind of machine in the last
    ``runs`` DAG runs that measured it (of any DAG), strictly before ``before``: a datetime, or a
    DAG run, ``(dag_id, run_id)`` (that run's time, the run itself excluded; a DAG run not stored
    yet excludes nothing but itself). Ordered oldest first, as ``history``."""
    measured = ((repeats.c.variant == variant) & (repeats.c.launcher == launcher)
                & (repeats.c.environment == fingerprint) & (repeats.c.status == "ok")
                & repeats.c.samples_per_sec.is_not(None))
    with _ready(url).connect() as connection:
        if isinstance(before, tuple):
            itself = (dag_runs.c.dag_id == before[0]) & (dag_runs.c.run_id == before[1])
            cutoff = connection.execute(sa.select(dag_runs.c.measured_at).where(itself)).scalar()
            earlier = ~itself
            if cutoff is not None:
                earlier = earlier & (dag_runs.c.measured_at < cutoff)
        else:
            earlier = dag_runs.c.measured_at < _time(before)
        # newest first through the measured_at index, each probed in ix_repeats_baseline
        chosen = (sa.select(dag_runs.c.dag_id, dag_runs.c.run_id).where(earlier)
                  .where(sa.exists().where(measured & OF_ITS_DAG_RUN))
                  .order_by(dag_runs.c.measured_at.desc(), dag_runs.c.dag_id.desc(), dag_runs.c.run_id.desc())
                  .limit(runs).subquery())
        query = (sa.select(*HISTORY_COLUMNS).join(dag_runs, OF_ITS_DAG_RUN)
                 .join(chosen, (chosen.c.dag_id == repeats.c.dag_id) & (chosen.c.run_id == repeats.c.dag_run))
                 .where(measured)
                 .order_by(dag_runs.c.measured_at, dag_runs.c.dag_id, dag_runs.c.run_id, repeats.c.repeat))
        return _frame(connection, query)


__all__ = ["StoreError", "default_url", "url_of_connection", "without_password", "errors_without_password",
           "engine", "migrate", "fingerprint",
           "record_dag_run", "import_runs", "history", "read_history", "baseline", "what_ran", "metadata"]

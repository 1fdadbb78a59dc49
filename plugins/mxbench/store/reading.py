"""Reading the results store: every repeat's ``history``, the UI's ``read_history`` (which never
migrates), what each DAG run's variants were (``read_sizes``, for the scaling views) and a
regression check's ``baseline``, the A/A calibrations (``aa_calibrations``) and what their runs saw of
other work (``aa_interference``); ``what_ran`` names the MXNet build a row ran."""
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator, Optional, Tuple, Union

import pandas as pd
import sqlalchemy as sa

from mxbench import config
from mxbench.regression.regression_rule import feeding_dags
from mxbench.store.database import engine, ready_engine
from mxbench.store.recording import utc_time
from mxbench.store.schema import dag_runs, environments, repeats, variants
from mxbench.store.store_errors import UNSHOWN, StoreError, first_line, shown, without_password

HISTORY_COLUMNS = [dag_runs.c.measured_at, dag_runs.c.logical_date, dag_runs.c.started_at,
                   dag_runs.c.run_id, dag_runs.c.dag_id, dag_runs.c.trigger, dag_runs.c.mxnet_version,
                   dag_runs.c.mxnet_package, dag_runs.c.mxnet_commit, repeats.c.mxnet_asked, repeats.c.mxnet_reported,
                   repeats.c.runtime, repeats.c.setup_key, repeats.c.variant, repeats.c.launcher, repeats.c.repeat,
                   repeats.c.environment, repeats.c.status, repeats.c.cause, repeats.c.samples_per_sec,
                   repeats.c.sec_per_epoch, repeats.c.target_accuracy, repeats.c.time_to_target_s,
                   repeats.c.contended, repeats.c.link_bits, repeats.c.link_bytes_per_step]
PROBE_DAG_IDS = config.PROBE_DAG_IDS
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
    with ready_engine(url).connect() as connection:
        return _frame(connection, _history_query(variant, launcher, fingerprint, dag_ids))


@contextmanager
def reader(url: str, table: str) -> Iterator[Optional[sa.Connection]]:
    """A connection for a reader (the UI's pages), which never creates or upgrades the database:
    None where the database, or its ``table``, is not there yet. Errors: ``StoreError``, without
    the URL's password."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results store's URL is not a database URL ({UNSHOWN})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(parsed.database).is_file():
        yield None
        return
    try:
        with engine(url).connect() as connection:
            yield connection if sa.inspect(connection).has_table(table) else None
    except sa.exc.OperationalError as exc:  # as ``migrate`` says it
        raise StoreError(without_password(f"cannot reach the results store at {shown(url)}: {first_line(exc)}",
                                          url)) from None
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(without_password(first_line(exc), url)) from None


def read_history(url: str, variant: Optional[str] = None, launcher: Optional[str] = None,
                 fingerprint: Optional[str] = None, dag_ids: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """``history`` for a reader (the UI's history page, the command line; ``reader``): a store not
    there yet has no history (a mistyped URL makes no database), and one at an older revision
    reads the columns it lacks as NULL."""
    with reader(url, "repeats") as connection:
        if connection is None:
            return pd.DataFrame(columns=[c.name for c in HISTORY_COLUMNS] + ["build"])
        # the api-server may run this code before any store task has upgraded the database
        stored = {c["name"] for c in sa.inspect(connection).get_columns("repeats")}
        columns = [c if c.table is not repeats or c.name in stored else sa.null().label(c.name)
                   for c in HISTORY_COLUMNS]
        return _frame(connection, _history_query(variant, launcher, fingerprint, dag_ids, columns=columns))


SIZE_COLUMNS = [repeats.c.dag_id, repeats.c.dag_run.label("run_id"), repeats.c.variant, variants.c.devices,
                variants.c.workers, variants.c.hosts, variants.c.gpus_per_worker, variants.c.batch_size,
                variants.c.batch_per_device, variants.c.kvstore, variants.c.num_layers]


def read_sizes(url: str) -> pd.DataFrame:
    """What each stored DAG run's variants were, for the scaling views (``results.stored``): per
    ``(dag_id, run_id, variant)``, the variants table's devices, workers, hosts, GPUs per worker,
    batch sizes, kvstore and depth, and ``depth_override``, the DAG run's ``num_layers`` param (None:
    none given). The variants table keeps each variant id's last recorded definition; a depth
    override keeps the id, so a DAG run's own depth is its override where it gave one. A reader
    (``reader``): never makes or upgrades the store; no rows where it is not there yet."""
    columns = [c.name for c in SIZE_COLUMNS] + ["depth_override"]
    with reader(url, "variants") as connection:
        if connection is None:
            return pd.DataFrame(columns=columns)
        found = pd.DataFrame(connection.execute(sa.select(*SIZE_COLUMNS).distinct()
                                                .join(variants, repeats.c.variant == variants.c.id)).mappings().all(),
                             columns=columns[:-1])
        # params is JSON (no equality on PostgreSQL: not in a DISTINCT), read apart
        params = pd.DataFrame(connection.execute(sa.select(dag_runs.c.dag_id, dag_runs.c.run_id, dag_runs.c.params))
                              .mappings().all(), columns=["dag_id", "run_id", "params"])
    depth = params.assign(depth_override=[(p or {}).get("num_layers") if isinstance(p, dict) else None
                                          for p in params["params"]]).drop(columns="params")
    return found.merge(depth, on=["dag_id", "run_id"], how="left")


def baseline(url: str, variant: str, launcher: str, fingerprint: str, before: Union[datetime, Tuple[str, str]],
             runs: int = 5, since: Optional[datetime] = None, *, setup: Optional[str],
             dag_ids: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """The successful repeats of ``variant`` on ``launcher`` and this kind of machine that measured
    ``setup`` (their ``setup_key``, ``variants.measured_setup``: an override of the variant's depth or
    epochs is another setup; rows stored before revision 0007 have none and are never taken; None
    takes nothing) in the
    last ``runs`` DAG runs that measured it, of the DAGs that may feed a baseline (``dag_ids``,
    default ``config.baseline_dags()``: the deployer's ``MXBENCH_BASELINE_DAGS``; a bisect's,
    ``PROBE_DAG_IDS``, never), strictly
    before ``before``: a datetime, or a DAG run, ``(dag_id, run_id)`` (that run's time, the run
    itself excluded; a DAG run not stored yet excludes nothing but itself), and, with ``since``,
    none measured before it (a distribution change starts the series over:
    ``triage.baseline_start``). Contended repeats (other work on their hosts, revision 0009) are never
    taken, and a DAG run none of whose repeats was quiet is no baseline DAG run; ``attrs
    ["contended_left_out"]`` says how many were left out of the DAG runs it spans. Ordered oldest
    first, as ``history``."""
    measured = ((repeats.c.variant == variant) & (repeats.c.launcher == launcher)
                & (repeats.c.environment == fingerprint)
                # a row without a setup_key (stored before revision 0007) measured something unknown
                & (repeats.c.setup_key == setup if setup is not None else sa.false())
                & (repeats.c.status == "ok")
                & repeats.c.samples_per_sec.is_not(None))
    # a contended repeat (other work on its hosts) neither raises nor hides an alert: counted, never taken
    busy = measured & (repeats.c.contended.is_(True))
    measured = measured & repeats.c.contended.is_not(True)
    with ready_engine(url).connect() as connection:
        if isinstance(before, tuple):
            itself = (dag_runs.c.dag_id == before[0]) & (dag_runs.c.run_id == before[1])
            cutoff = connection.execute(sa.select(dag_runs.c.measured_at).where(itself)).scalar()
            earlier = ~itself
            if cutoff is not None:
                earlier = earlier & (dag_runs.c.measured_at < cutoff)
        else:
            earlier = dag_runs.c.measured_at < utc_time(before)
        if since is not None:
            earlier = earlier & (dag_runs.c.measured_at >= utc_time(since))
        # newest first through the measured_at index, each probed in ix_repeats_baseline
        earlier = earlier & dag_runs.c.dag_id.in_(feeding_dags(dag_ids))
        chosen = (sa.select(dag_runs.c.dag_id, dag_runs.c.run_id).where(earlier)
                  .where(sa.exists().where(measured & OF_ITS_DAG_RUN))
                  .order_by(dag_runs.c.measured_at.desc(), dag_runs.c.dag_id.desc(), dag_runs.c.run_id.desc())
                  .limit(runs).subquery())
        query = (sa.select(*HISTORY_COLUMNS).join(dag_runs, OF_ITS_DAG_RUN)
                 .join(chosen, (chosen.c.dag_id == repeats.c.dag_id) & (chosen.c.run_id == repeats.c.dag_run))
                 .where(measured)
                 .order_by(dag_runs.c.measured_at, dag_runs.c.dag_id, dag_runs.c.run_id, repeats.c.repeat))
        found = _frame(connection, query)
        # the contended repeats of the DAG runs it spans (all of them while it holds fewer than ``runs``)
        span = earlier if found.empty or found[["dag_id", "run_id"]].drop_duplicates().shape[0] < runs else \
            earlier & (dag_runs.c.measured_at >= utc_time(found["measured_at"].min()))
        found.attrs["contended_left_out"] = int(connection.execute(
            sa.select(sa.func.count()).select_from(repeats.join(dag_runs, OF_ITS_DAG_RUN)).where(busy & span)).scalar())
        return found


def dag_run_time(url: str, dag_id: str, run_id: str) -> Optional[datetime]:
    """The stored DAG run's ``measured_at`` (what baselines order by); None when it is not stored."""
    with ready_engine(url).connect() as connection:
        return connection.execute(sa.select(dag_runs.c.measured_at).where(
            (dag_runs.c.dag_id == dag_id) & (dag_runs.c.run_id == run_id))).scalar()


AA_COLUMNS = [dag_runs.c.dag_id, dag_runs.c.run_id.label("dag_run"), dag_runs.c.measured_at, dag_runs.c.params,
              repeats.c.variant, repeats.c.launcher, repeats.c.repeat, repeats.c.environment, repeats.c.status,
              repeats.c.samples_per_sec, repeats.c.started_at, repeats.c.ended_at]


def aa_calibrations(url: str, fingerprints: Iterable[str], latest: int = 20) -> pd.DataFrame:
    """Every repeat of the ``latest`` A/A calibrations (DAG runs with an arm b, ``local-b``,
    measured) on these kinds of machine, oldest first: what ``calibration.stored_noise`` reads."""
    fingerprints = [f for f in fingerprints if f]
    columns = [c.name for c in AA_COLUMNS]
    if not fingerprints:
        return pd.DataFrame(columns=columns)
    arm_b = (repeats.c.launcher.like("%-b") & repeats.c.environment.in_(fingerprints)
             & (repeats.c.status == "ok"))
    calibrated = (sa.select(dag_runs.c.dag_id, dag_runs.c.run_id.label("dag_run"))
                  .where(sa.exists().where(arm_b & OF_ITS_DAG_RUN))
                  .order_by(dag_runs.c.measured_at.desc()).limit(latest).subquery())
    query = (sa.select(*AA_COLUMNS).join(dag_runs, OF_ITS_DAG_RUN)
             .join(calibrated, (calibrated.c.dag_id == repeats.c.dag_id) & (calibrated.c.dag_run == repeats.c.dag_run))
             # a run that failed has no machine: the pairing must see it fail, as the report did
             .where(repeats.c.environment.in_(fingerprints) | repeats.c.environment.is_(None))
             .order_by(dag_runs.c.measured_at, repeats.c.dag_id, repeats.c.dag_run, repeats.c.started_at))
    with ready_engine(url).connect() as connection:
        return pd.DataFrame(connection.execute(query).mappings().all(), columns=columns)


AA_INTERFERENCE_COLUMNS = [repeats.c.environment, repeats.c.launcher, repeats.c.dag_id,
                           repeats.c.dag_run.label("dag_run"), dag_runs.c.measured_at, repeats.c.foreign_cores,
                           repeats.c.steal, repeats.c.cpu_pressure]
AA_FELT_COLUMNS = [repeats.c.run_pressure, repeats.c.canary_s]  # revision 0010


def aa_interference(url: str, latest: int = 20, dag_ids: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """What the measured runs of the ``latest`` A/A calibrations on each kind of machine and under
    each launcher saw of other work (``foreign_cores``, ``steal``, ``cpu_pressure``; revision 0009; ``run_pressure``,
    ``canary_s``: revision 0010, None before), newest first: what the contention thresholds of that
    hardware are made of (``contention.from_aa``). Only calibrations of ``dag_ids`` (default
    ``config.calibration_dags()``: the deployer's ``MXBENCH_CALIBRATION_DAGS``) count, and only their
    runs not judged contended. A reader (``reader``): a store not there yet, or from before revision
    0009, has no rows."""
    trusted = list(config.calibration_dags() if dag_ids is None else dag_ids)
    names = [c.name for c in AA_INTERFERENCE_COLUMNS + AA_FELT_COLUMNS]
    with reader(url, "repeats") as connection:
        stored = set() if connection is None else {c["name"] for c in sa.inspect(connection).get_columns("repeats")}
        if "foreign_cores" not in stored or not trusted:
            return pd.DataFrame(columns=names)
        felt = [c for c in AA_FELT_COLUMNS if c.name in stored]
        arm = repeats.alias("arm_b")  # a calibration: its DAG run measured an arm b
        calibration = sa.exists().where(arm.c.launcher.like("%-b") & (arm.c.status == "ok")
                                        & (arm.c.dag_id == repeats.c.dag_id) & (arm.c.dag_run == repeats.c.dag_run))
        read = sa.or_(*[c.is_not(None) for c in [repeats.c.foreign_cores, repeats.c.steal, *felt]])
        # a run judged contended saw a neighbour: it is no measure of this hardware's quiet
        quiet = repeats.c.contended.is_(None) | (repeats.c.contended == sa.false())
        query = (sa.select(*AA_INTERFERENCE_COLUMNS, *felt).join(dag_runs, OF_ITS_DAG_RUN)
                 .where(calibration & (repeats.c.status == "ok") & repeats.c.environment.is_not(None) & read
                        & quiet & repeats.c.dag_id.in_(trusted))
                 .order_by(dag_runs.c.measured_at.desc(), repeats.c.run_key))
        rows = pd.DataFrame(connection.execute(query).mappings().all(), columns=names)
    # an arm b is its launcher: local and local-b ran alike
    rows["launcher"] = rows["launcher"].str.removesuffix("-b")
    # per kind of machine and launcher, its latest calibrations only: neighbours change over the months
    kinds = ["environment", "launcher"]
    newest = rows.drop_duplicates([*kinds, "dag_id", "dag_run"]).groupby(kinds).head(latest)
    return rows.merge(newest[[*kinds, "dag_id", "dag_run"]], on=[*kinds, "dag_id", "dag_run"])


def machine_names(url: str) -> dict:
    """Fingerprint -> the machine's name (``host_class``: "cpu: AMD EPYC 7B13 x2"), for a reader
    (``reader``): empty where the store is not there yet."""
    with reader(url, "environments") as connection:
        if connection is None:
            return {}
        return dict(connection.execute(sa.select(environments.c.fingerprint, environments.c.host_class)).all())

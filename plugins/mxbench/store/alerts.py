"""Alert triage in the results store: each alert's state as a person last set it (``alerts``) and
every change, who made it, from what to what and why (``alert_changes``). The states and their
rules: ``mxbench.regression.triage``. An alert without a row is new."""
from datetime import datetime
from typing import Optional

import pandas as pd
import sqlalchemy as sa

from mxbench.regression import triage
from mxbench.store.database import ready_engine
from mxbench.store.reading import reader
from mxbench.store.schema import alert_changes, alerts, dag_runs, repeats, utcnow
from mxbench.store.store_errors import StoreError

SERIES_KEY = ("dag_id", "run_id", "variant", "launcher", "environment")
ALERT_COLUMNS = [*SERIES_KEY, "state", "level", "changed_by", "reason", "changed_at"]


class NoSuchAlert(StoreError):
    """The DAG run measured nothing on that series: there is nothing to triage."""


class ConcurrentChange(StoreError):
    """Two changes of one alert at once: the later one is refused, not merged."""


def machine_key(environment) -> str:
    """The ``environment`` column's value for a run's machine: its fingerprint, "" for none."""
    return "" if environment is None or (isinstance(environment, float) and pd.isna(environment)) else str(environment)


def _of(table, dag_id, run_id, variant, launcher, environment):
    return ((table.c.dag_id == dag_id) & (table.c.run_id == run_id) & (table.c.variant == variant)
            & (table.c.launcher == launcher) & (table.c.environment == machine_key(environment)))


def _level(connection, dag_id, run_id, variant, launcher, environment) -> Optional[float]:
    """The DAG run's median samples/s on the series; NoSuchAlert when it measured nothing there."""
    machine = (repeats.c.environment.is_(None) if machine_key(environment) == ""
               else repeats.c.environment == environment)
    speeds = connection.execute(sa.select(repeats.c.samples_per_sec).where(
        (repeats.c.dag_id == dag_id) & (repeats.c.dag_run == run_id) & (repeats.c.variant == variant)
        & (repeats.c.launcher == launcher) & machine & (repeats.c.status == "ok")
        & repeats.c.samples_per_sec.is_not(None))).scalars().all()
    if not speeds:
        raise NoSuchAlert(f"DAG run {run_id} of {dag_id} measured nothing of {variant} on {launcher} "
                          f"(machine {machine_key(environment) or 'none'}): there is no alert to triage")
    return float(pd.Series(speeds).median())


def set_alert_state(url: str, dag_id: str, run_id: str, variant: str, launcher: str, environment, state: str,
                    user: str, reason: str = "", now: Optional[datetime] = None) -> dict:
    """Set the alert's state, as ``user`` says why, and record the change; one transaction, so
    the state and its record never disagree. ``triage.TriageError`` for a change that is not
    allowed, ``NoSuchAlert`` when the DAG run measured nothing on the series. The alert's row."""
    now = now or utcnow()
    try:
        return _set_alert_state(url, dag_id, run_id, variant, launcher, environment, state, user, reason, now)
    except sa.exc.IntegrityError:  # another change of the same alert committed first
        raise ConcurrentChange(f"{variant} ({launcher}) in DAG run {run_id} was changed by someone else at the same "
                               "time: reload the history page and look again") from None


def _set_alert_state(url, dag_id, run_id, variant, launcher, environment, state, user, reason, now) -> dict:
    with ready_engine(url).begin() as connection:
        where = _of(alerts, dag_id, run_id, variant, launcher, environment)
        current = connection.execute(sa.select(alerts.c.state).where(where)).scalar() or triage.NEW
        reason = triage.check_change(current, state, reason)
        level = _level(connection, dag_id, run_id, variant, launcher, environment)
        row = {"dag_id": dag_id, "run_id": run_id, "variant": variant, "launcher": launcher,
               "environment": machine_key(environment), "state": state, "level": level, "changed_by": user,
               "reason": reason, "changed_at": now}
        connection.execute(alerts.delete().where(where))
        connection.execute(alerts.insert().values(**row))
        connection.execute(alert_changes.insert().values(
            **{k: row[k] for k in SERIES_KEY}, from_state=current, to_state=state, changed_by=user, reason=reason,
            changed_at=now))
    return row


def series_alerts(url: str, variant: str, launcher: str, fingerprint, dag_id: Optional[str] = None) -> pd.DataFrame:
    """The alerts of one series (variant, launcher, kind of machine) that a person triaged, with
    their DAG runs' ``measured_at``: what ``triage.baseline_start`` and ``triage.covering_alert`` read.
    With ``dag_id``, only that DAG's: a user allowed to edit one DAG's runs must not silence or
    reset another's checks."""
    query = (sa.select(alerts, dag_runs.c.measured_at)
             .join(dag_runs, (dag_runs.c.dag_id == alerts.c.dag_id) & (dag_runs.c.run_id == alerts.c.run_id))
             .where((alerts.c.variant == variant) & (alerts.c.launcher == launcher)
                    & (alerts.c.environment == machine_key(fingerprint)))
             .order_by(dag_runs.c.measured_at))
    if dag_id is not None:
        query = query.where(alerts.c.dag_id == dag_id)
    with ready_engine(url).connect() as connection:
        result = connection.execute(query)
        return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


def read_alerts(url: str) -> pd.DataFrame:
    """Every triaged alert, for a reader (the history page, ``reading.reader``): a store without
    the table yet has none."""
    with reader(url, "alerts") as connection:
        if connection is None:
            return pd.DataFrame(columns=ALERT_COLUMNS)
        result = connection.execute(sa.select(*(alerts.c[name] for name in ALERT_COLUMNS)))
        return pd.DataFrame(result.fetchall(), columns=ALERT_COLUMNS)


def alert_history(url: str) -> pd.DataFrame:
    """Every change of every alert's state, oldest first: the audit record."""
    with ready_engine(url).connect() as connection:
        result = connection.execute(sa.select(alert_changes).order_by(alert_changes.c.id))
        return pd.DataFrame(result.fetchall(), columns=list(result.keys()))

"""Triage of regression alerts: the states a person gives an alert on the history page, which
changes are allowed, and what each state does to later regression checks. Pure: no Airflow, no
database (the store keeps the states: ``store.alerts``).

An alert is one DAG run's regression on one series: a variant, launcher and kind of machine.

- new: not looked at yet (every alert starts so; setting it again reopens one).
- acknowledged: a person knows and said why. A later regression of the same series that is no
  slower than this alert's level (by less than the smallest drop alerted) does not fail its DAG
  run: it is reported with the state instead.
- expected: the same, for a slowdown that was meant (a heavier default, say).
- distribution change: the new level is the normal one now: the series' baseline starts at this
  DAG run, so later DAG runs are compared with it and what came after, never with what came before.
"""
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

import pandas as pd

NEW, ACKNOWLEDGED, EXPECTED, DISTRIBUTION_CHANGE = "new", "acknowledged", "expected", "distribution change"
STATES = (NEW, ACKNOWLEDGED, EXPECTED, DISTRIBUTION_CHANGE)
ACCEPTING = (ACKNOWLEDGED, EXPECTED)  # the states under which a regression at that level does not fail a DAG run
# a person says why for every state but new (reopening needs no reason)
NEEDS_REASON = (ACKNOWLEDGED, EXPECTED, DISTRIBUTION_CHANGE)
# any state to any other; a distribution change is undone by reopening the alert (back to new)
ALLOWED = {NEW: (ACKNOWLEDGED, EXPECTED, DISTRIBUTION_CHANGE),
           ACKNOWLEDGED: (NEW, EXPECTED, DISTRIBUTION_CHANGE),
           EXPECTED: (NEW, ACKNOWLEDGED, DISTRIBUTION_CHANGE),
           DISTRIBUTION_CHANGE: (NEW,)}
MAX_REASON = 2000  # characters: a sentence or two, not a log
# control characters, line and paragraph separators: a reason is one line of text (the form's
# field is one line), and a line break in it would forge lines wherever it is logged or shown
REFUSED_CATEGORIES = ("Cc", "Zl", "Zp")


class TriageError(ValueError):
    """A change of state that is not allowed; its message says which and why."""


def check_change(current: str, new: str, reason: str) -> str:
    """The reason, trimmed, when ``current`` -> ``new`` is allowed; TriageError otherwise."""
    reason = (reason or "").strip()
    if new not in STATES:
        raise TriageError(f"{new!r} is not an alert state: one of {', '.join(STATES)}")
    if new == current:
        raise TriageError(f"the alert is already {current}")
    if new not in ALLOWED[current]:
        raise TriageError(f"an alert that is {current} can become {' or '.join(ALLOWED[current])}, not {new}")
    if new in NEEDS_REASON and not reason:
        raise TriageError(f"say why the alert is {new}: the reason is kept with who set it")
    if len(reason) > MAX_REASON:
        raise TriageError(f"the reason is {len(reason)} characters long; at most {MAX_REASON}")
    refused = next((c for c in reason if unicodedata.category(c) in REFUSED_CATEGORIES), None)
    if refused is not None:
        raise TriageError(f"the reason holds a control character or line break (U+{ord(refused):04X}): "
                          "give it as one line of text")
    return reason


@dataclass
class Covering:
    """The alert that a regression is reported under instead of failing its DAG run."""
    state: str
    dag_id: str
    run_id: str
    changed_by: str
    reason: str
    level: float

    def note(self) -> str:
        return (f"{self.state} by {self.changed_by} at {self.dag_id}/{self.run_id} ({self.level:.1f} samples/s): "
                f"{self.reason}")


def _effective(alerts: pd.DataFrame, at: datetime) -> pd.DataFrame:
    """The series' alerts of DAG runs measured at or before ``at``, oldest first. ``alerts``:
    ``store.series_alerts``' rows (``measured_at``, ``state``, ...)."""
    if alerts.empty:
        return alerts
    when = pd.to_datetime(alerts["measured_at"], utc=True)
    return alerts[when <= pd.Timestamp(at)].assign(when=when).sort_values("when")


def baseline_start(alerts: pd.DataFrame, at: datetime) -> Optional[datetime]:
    """When the series' baseline starts for a DAG run measured at ``at``: the time of the latest
    DAG run marked "distribution change" at or before it; None: no such run, the baseline is the
    usual last DAG runs."""
    alerts = _effective(alerts, at)
    changed = alerts[alerts["state"] == DISTRIBUTION_CHANGE] if not alerts.empty else alerts
    return None if changed.empty else changed["when"].iloc[-1].to_pydatetime()


def covering_alert(alerts: pd.DataFrame, at: datetime, current: Optional[float],
                   min_drop: float) -> Optional[Covering]:
    """The acknowledged or expected alert that covers a regression measured at ``at`` with median
    ``current`` samples/s: the latest such alert of the series at or before it (after any
    distribution change, which starts the series over) whose level ``current`` is not ``min_drop``
    or more below. None: the regression stands."""
    alerts = _effective(alerts, at)
    if alerts.empty or current is None:
        return None
    start = baseline_start(alerts, at)
    if start is not None:
        alerts = alerts[alerts["when"] >= pd.Timestamp(start)]
    accepted = alerts[alerts["state"].isin(ACCEPTING) & alerts["level"].notna()]
    for row in reversed(accepted.to_dict("records")):
        if current >= row["level"] * (1 - min_drop):
            return Covering(row["state"], row["dag_id"], row["run_id"], row["changed_by"], row["reason"] or "",
                            float(row["level"]))
    return None

"""The results store: every DAG run's measurements, kept across runs, behind SQLAlchemy.

A SQLite file ``$MXBENCH_HOME/results.db`` by default; ``MXBENCH_RESULTS_URL`` (any SQLAlchemy
URL, e.g. ``postgresql+psycopg2://user@host/db``) overrides it. The schema is made and upgraded
by the Alembic migrations in ``migrations/`` (``migrate``); every other call migrates first, once
per process, so a fresh or older database just works.

No Airflow here: the DAG passes in what it knows (run id, trigger, dates), the rest is read from
the DAG run's folder as the pipeline leaves it after ``join_results``.

Modules: ``store_errors`` (StoreError, messages without passwords), ``database`` (URL, engine,
migrations), ``recording`` (storing DAG runs), ``reading`` (history, variants' sizes, baselines, A/A calibrations),
``alerts`` (the triage state of regression alerts and its record), ``bisect_chains`` (which DAG runs
belong to a bisect) and ``schema`` (the tables).
Their public names are exported here.
"""
from mxbench.store.alerts import (
    ConcurrentChange,
    NoSuchAlert,
    alert_history,
    read_alerts,
    series_alerts,
    set_alert_state,
)
from mxbench.store.bisect_chains import (
    ChainRefused,
    advance_chain,
    blocks_range,
    chain,
    chain_started_by,
    chains_over,
    claim,
    params_digest,
    run_id_for,
    start_chain,
    starter_kind,
)
from mxbench.store.database import (
    MIGRATIONS,
    URL_ENV,
    alembic_config,
    default_url,
    engine,
    engine_name,
    migrate,
    ready_engine,
    url_of_connection,
)
from mxbench.store.reading import (
    PROBE_DAG_IDS,
    aa_calibrations,
    aa_interference,
    baseline,
    dag_run_time,
    history,
    machine_names,
    read_history,
    read_sizes,
    what_ran,
)
from mxbench.store.recording import TRIGGERS, fingerprint, import_runs, record_dag_run
from mxbench.store.schema import metadata
from mxbench.store.store_errors import StoreError, errors_without_password, safe_error, shown, without_password

__all__ = ["StoreError", "shown", "without_password", "safe_error", "errors_without_password",
           "URL_ENV", "MIGRATIONS", "default_url", "url_of_connection", "engine_name", "engine", "alembic_config",
           "migrate", "ready_engine", "TRIGGERS", "fingerprint", "record_dag_run", "import_runs", "history",
           "read_history", "read_sizes", "baseline", "start_chain", "chain", "chain_started_by", "chains_over",
           "advance_chain",
           "params_digest", "claim", "ChainRefused", "blocks_range", "run_id_for", "starter_kind",
           "dag_run_time", "machine_names", "what_ran", "aa_calibrations", "aa_interference", "metadata", "NoSuchAlert",
           "set_alert_state", "series_alerts", "read_alerts", "alert_history", "PROBE_DAG_IDS", "ConcurrentChange"]

"""The results store's tables at the newest revision (SQLAlchemy Core).

The migrations in ``migrations/versions`` create these; they do not import this module, so that an
old migration keeps meaning what it meant when it was written. ``tests/orchestration/store/test_store.py``
checks that a migrated database matches these definitions.

Times are stored as naive UTC (``UTCDateTime``): SQLite has no time zones, and one convention on
every backend keeps comparisons right.
"""
from datetime import datetime, timezone

import sqlalchemy as sa

metadata = sa.MetaData()


class UTCDateTime(sa.types.TypeDecorator):
    """Aware datetimes in, aware UTC datetimes out; naive UTC in the database."""
    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        return value.replace(tzinfo=timezone.utc) if value is not None else None


# One row per kind of machine: the hardware facts a number depends on, hashed.
environments = sa.Table(
    "environments", metadata,
    sa.Column("fingerprint", sa.String(16), primary_key=True),  # sha256(facts)[:16]
    sa.Column("gpu_model", sa.String(200)),  # None: no GPU; mixed models joined with " + "
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("driver", sa.String(50)),
    sa.Column("cuda", sa.String(50)),
    sa.Column("cpu_model", sa.String(200)),
    sa.Column("cpu_count", sa.Integer),
    sa.Column("host_class", sa.String(250), nullable=False),  # "gpu: 8x Tesla V100", "cpu: AMD EPYC x2"
    sa.Column("first_seen", UTCDateTime, nullable=False),
)

# One row per DAG run. Run ids are unique per DAG only (a manual run may take the id of another
# DAG's scheduled run), so the key is both (revision 0003).
dag_runs = sa.Table(
    "dag_runs", metadata,
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("trigger", sa.String(20), nullable=False),  # manual | scheduled | backfill
    sa.Column("logical_date", UTCDateTime),
    sa.Column("data_interval_start", UTCDateTime),
    sa.Column("data_interval_end", UTCDateTime),
    # logical_date, else the first run's start, else when recorded: what history and baselines order by
    sa.Column("measured_at", UTCDateTime, nullable=False, index=True),
    sa.Column("mxnet_version", sa.String(50)),  # the first measured run's; each run's own: repeats (0004)
    sa.Column("mxnet_package", sa.String(200)),  # the build asked for: "mxnet==1.9.0"
    sa.Column("mxnet_commit", sa.String(64)),
    sa.Column("image", sa.String(500)),  # revision 0002: the image its Kubernetes runs used; None: no run used one
    sa.Column("preset", sa.String(50)),
    sa.Column("params", sa.JSON),
    sa.Column("folder", sa.String(1000)),
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("state", sa.String(10), nullable=False),  # ok: every run measured; else failed
    sa.Column("runs_ok", sa.Integer, nullable=False),
    sa.Column("runs_failed", sa.Integer, nullable=False),
    sa.Column("environment", sa.String(16), sa.ForeignKey("environments.fingerprint")),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("dag_id", "run_id"),
)

variants = sa.Table(
    "variants", metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("setup", sa.String(200)),
    sa.Column("devices", sa.Integer),
    sa.Column("workers", sa.Integer),
    sa.Column("hosts", sa.Integer),
    sa.Column("gpus_per_worker", sa.Integer),
    sa.Column("batch_size", sa.Integer),
    sa.Column("batch_per_device", sa.Integer),
    sa.Column("kvstore", sa.String(50)),
    sa.Column("num_layers", sa.Integer),
    sa.Column("epochs", sa.Integer),
)

# One row per run of a DAG run (variant x launcher x repeat), measured or not.
repeats = sa.Table(
    "repeats", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dag_id", sa.String(250), nullable=False),  # revision 0003: with dag_run, the DAG run's key
    sa.Column("dag_run", sa.String(250), nullable=False),  # its run id
    sa.Column("run_key", sa.String(300), nullable=False),
    sa.Column("variant", sa.String(200), sa.ForeignKey("variants.id"), nullable=False),
    sa.Column("launcher", sa.String(50), nullable=False),
    sa.Column("machine_set", sa.String(100)),  # revision 0002
    sa.Column("repeat", sa.Integer, nullable=False),
    # the machine this run measured on (its own metrics.json): launchers of one DAG run may differ
    sa.Column("environment", sa.String(16), sa.ForeignKey("environments.fingerprint")),
    # revision 0004: what this run ran on (NULL in rows stored before it)
    sa.Column("mxnet_asked", sa.String(200)),  # the build asked for: "mxnet==1.9.0"
    sa.Column("mxnet_reported", sa.String(50)),  # the version the trainer imported: "1.9.0"
    sa.Column("runtime", sa.String(1000)),  # the interpreter's path or the image, whichever the run used
    # revision 0007: what the run measured (``variants.measured_setup``): a baseline pools only runs of one
    # setup; NULL in rows stored before it, which no baseline takes
    sa.Column("setup_key", sa.String(16)),
    sa.Column("status", sa.String(20), nullable=False),  # ok | failed | not run | skipped (an optional round)
    sa.Column("cause", sa.Text),
    sa.Column("samples_per_sec", sa.Float),
    sa.Column("epoch_samples_per_sec", sa.Float),
    sa.Column("sec_per_epoch", sa.Float),
    sa.Column("validation_accuracy", sa.Float),
    # revision 0005: seconds of training (summed epoch time costs) until validation top-1 first reached
    # target_accuracy; NULL: never reached, or no target / no validation data
    sa.Column("target_accuracy", sa.Float),
    sa.Column("time_to_target_s", sa.Float),
    sa.Column("gpu_util_pct", sa.Float),
    sa.Column("gpu_mem_mib", sa.Float),
    # revision 0009: what else used the run's hosts (``results.contention``); NULL: not measured
    sa.Column("cpu_pressure", sa.Float),  # worst host's PSI "some" share of the run's time
    sa.Column("steal", sa.Float),  # worst host's share of CPU time stolen by the hypervisor
    sa.Column("foreign_cores", sa.Float),  # worst host's CPU used by processes outside the run, in cores
    sa.Column("contended", sa.Boolean),
    # revision 0010: what the run felt itself; NULL: not measured
    sa.Column("run_pressure", sa.Float),  # worst worker's CPU pressure ("some") in its own cgroup
    sa.Column("canary_s", sa.Float),  # slowest time of its workers' canary workload, before or after
    # revision 0011: the link between its hosts (the scaling model's network term); NULL: none stated or read
    sa.Column("link_bits", sa.Float),  # the slowest link's rate, bits/s
    sa.Column("link_bytes_per_step", sa.Float),  # bytes its busiest host sent a step
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("duration_s", sa.Float),
    sa.ForeignKeyConstraint(["dag_id", "dag_run"], ["dag_runs.dag_id", "dag_runs.run_id"], ondelete="CASCADE"),
    sa.UniqueConstraint("dag_id", "dag_run", "run_key", name="uq_repeats_dag_id_dag_run_run_key"),
    # baseline() finds a variant's runs on one launcher and machine without a scan
    sa.Index("ix_repeats_baseline", "variant", "launcher", "environment", "dag_id", "dag_run"),
    sa.Index("ix_repeats_setup_baseline", "variant", "launcher", "environment", "setup_key", "dag_id", "dag_run"),
)

# revision 0006: the triage state of each alert (a DAG run's regression on one series: variant,
# launcher, kind of machine; "" for a run without a machine), as a person last set it on the
# history page, and every change to it (``mxbench.regression.triage``). Not tied to dag_runs by a foreign key:
# who said what stays on record even if a DAG run is deleted.
alerts = sa.Table(
    "alerts", metadata,
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("variant", sa.String(200), nullable=False),
    sa.Column("launcher", sa.String(50), nullable=False),
    sa.Column("environment", sa.String(16), nullable=False),
    sa.Column("state", sa.String(30), nullable=False),  # new | acknowledged | expected | distribution change
    sa.Column("level", sa.Float),  # the DAG run's median samples/s on the series, when the state was set
    sa.Column("changed_by", sa.String(250), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("changed_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("dag_id", "run_id", "variant", "launcher", "environment"),
    # the regression check reads a series' alerts
    sa.Index("ix_alerts_series", "variant", "launcher", "environment"),
)

alert_changes = sa.Table(
    "alert_changes", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dag_id", sa.String(250), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("variant", sa.String(200), nullable=False),
    sa.Column("launcher", sa.String(50), nullable=False),
    sa.Column("environment", sa.String(16), nullable=False),
    sa.Column("from_state", sa.String(30), nullable=False),
    sa.Column("to_state", sa.String(30), nullable=False),
    sa.Column("changed_by", sa.String(250), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("changed_at", UTCDateTime, nullable=False),
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# revision 0008: each bisect chain (``mxbench.store.bisect_chains``): minted by its first DAG run (or by
# the regression DAG that starts it), with the digest of the params its next DAG run must carry. A
# DAG run that claims a chain without them is refused; a trigger user cannot steer or stop one.
bisect_chains = sa.Table(
    "bisect_chains", metadata,
    sa.Column("chain_id", sa.String(32), primary_key=True),  # secrets.token_hex(16)
    sa.Column("dag_id", sa.String(250), nullable=False),
    # who minted it: the bisect's first DAG run (a person's), or the regression DAG run that started it
    sa.Column("starter_dag", sa.String(250), nullable=False),
    sa.Column("starter_run", sa.String(250), nullable=False),
    sa.Column("variant", sa.String(200), nullable=False),
    sa.Column("launcher", sa.String(50), nullable=False),
    sa.Column("good_build", sa.String(250), nullable=False),
    sa.Column("bad_build", sa.String(250), nullable=False),
    # the starter's run type: manual, scheduled, "backfill with conf", ... (bisect_chains.starter_kind)
    sa.Column("starter_kind", sa.String(20), nullable=False),
    sa.Column("salt", sa.String(32), nullable=False),  # never shown: makes the chain's run ids unguessable
    sa.Column("decided", sa.Integer, nullable=False),  # DAG runs of the chain decided so far
    sa.Column("expected_params", sa.String(64)),  # sha256 of the next DAG run's params; NULL: done
    sa.Column("claimed", sa.Boolean, nullable=False),  # a DAG run of the chain began
    sa.Column("answered", sa.Boolean, nullable=False),  # done, naming the first bad build
    sa.Column("last_decider", sa.String(250)),  # the run id that last moved it on, and from which params:
    sa.Column("last_params", sa.String(64)),  # a retry of that DAG run's decide hands the same on again
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # the regression DAG starts one bisect per range
    sa.Index("ix_bisect_chains_range", "dag_id", "variant", "launcher", "good_build", "bad_build"),
)

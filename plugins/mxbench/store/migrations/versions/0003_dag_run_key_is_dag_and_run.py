"""A DAG run is keyed by (dag_id, run_id): run ids are unique per DAG only.

Until 0002 ``dag_runs.run_id`` was the whole key, so a manual run of one DAG that took the id of
another DAG's scheduled run replaced that run's rows. Existing rows keep what they are: every
``dag_runs`` row already records the DAG that wrote it (``dag_id``: the DAG's own id, or
``mxbench_benchmark`` for folders imported by ``mxbench import`` without one), and each repeat
gets its DAG run's ``dag_id`` (unambiguous, as run ids were unique until now).

Both tables are rebuilt (new table, copy, drop, rename): the primary key and a foreign key
change, which SQLite cannot ALTER, and the same steps then serve every backend.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DAG_RUN_COLUMNS = ["run_id", "dag_id", "trigger", "logical_date", "data_interval_start", "data_interval_end",
                   "measured_at", "mxnet_version", "mxnet_package", "mxnet_commit", "image", "preset", "params",
                   "folder", "started_at", "ended_at", "state", "runs_ok", "runs_failed", "environment",
                   "recorded_at"]
REPEAT_COLUMNS = ["id", "dag_run", "run_key", "variant", "launcher", "machine_set", "repeat", "environment",
                  "status", "cause", "samples_per_sec", "epoch_samples_per_sec", "sec_per_epoch",
                  "validation_accuracy", "gpu_util_pct", "gpu_mem_mib", "started_at", "ended_at", "duration_s"]


def dag_runs_table(name, key):
    return op.create_table(
        name,
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("logical_date", sa.DateTime),
        sa.Column("data_interval_start", sa.DateTime),
        sa.Column("data_interval_end", sa.DateTime),
        sa.Column("measured_at", sa.DateTime, nullable=False),
        sa.Column("mxnet_version", sa.String(50)),
        sa.Column("mxnet_package", sa.String(200)),
        sa.Column("mxnet_commit", sa.String(64)),
        sa.Column("image", sa.String(500)),
        sa.Column("preset", sa.String(50)),
        sa.Column("params", sa.JSON),
        sa.Column("folder", sa.String(1000)),
        sa.Column("started_at", sa.DateTime),
        sa.Column("ended_at", sa.DateTime),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("runs_ok", sa.Integer, nullable=False),
        sa.Column("runs_failed", sa.Integer, nullable=False),
        sa.Column("environment", sa.String(16), sa.ForeignKey("environments.fingerprint")),
        sa.Column("recorded_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint(*key),
    )


def repeats_table(name, dag_runs, with_dag_id):
    key = ["dag_id", "dag_run"] if with_dag_id else ["dag_run"]
    return op.create_table(
        name,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        *([sa.Column("dag_id", sa.String(250), nullable=False)] if with_dag_id else []),
        sa.Column("dag_run", sa.String(250), nullable=False),
        sa.Column("run_key", sa.String(300), nullable=False),
        sa.Column("variant", sa.String(200), sa.ForeignKey("variants.id"), nullable=False),
        sa.Column("launcher", sa.String(50), nullable=False),
        sa.Column("machine_set", sa.String(100)),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("environment", sa.String(16), sa.ForeignKey("environments.fingerprint")),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("cause", sa.Text),
        sa.Column("samples_per_sec", sa.Float),
        sa.Column("epoch_samples_per_sec", sa.Float),
        sa.Column("sec_per_epoch", sa.Float),
        sa.Column("validation_accuracy", sa.Float),
        sa.Column("gpu_util_pct", sa.Float),
        sa.Column("gpu_mem_mib", sa.Float),
        sa.Column("started_at", sa.DateTime),
        sa.Column("ended_at", sa.DateTime),
        sa.Column("duration_s", sa.Float),
        sa.ForeignKeyConstraint(key, [f"{dag_runs}.{c}" for c in (["dag_id", "run_id"] if with_dag_id else ["run_id"])],
                                ondelete="CASCADE"),
        sa.UniqueConstraint(*key, "run_key",
                            name="uq_repeats_dag_id_dag_run_run_key" if with_dag_id else "uq_repeats_dag_run_run_key"),
    )


def rebuild(with_dag_id):
    """Copy both tables into ones of the wanted shape, then put those in their place."""
    dag_run_key = ["dag_id", "run_id"] if with_dag_id else ["run_id"]
    dag_runs_table("dag_runs_new", dag_run_key)
    repeats_table("repeats_new", "dag_runs_new", with_dag_id)
    columns = ", ".join(f'"{c}"' for c in DAG_RUN_COLUMNS)
    op.execute(f"INSERT INTO dag_runs_new ({columns}) SELECT {columns} FROM dag_runs")
    columns = ", ".join(f'"{c}"' for c in REPEAT_COLUMNS)
    picked = ", ".join(f'r."{c}"' for c in REPEAT_COLUMNS)
    if with_dag_id:  # each repeat takes its DAG run's dag_id
        op.execute(f'INSERT INTO repeats_new ({columns}, "dag_id") SELECT {picked}, d."dag_id" '
                   'FROM repeats r JOIN dag_runs d ON d."run_id" = r."dag_run"')
    else:
        op.execute(f"INSERT INTO repeats_new ({columns}) SELECT {picked} FROM repeats r")
    op.drop_table("repeats")
    op.drop_table("dag_runs")
    op.rename_table("dag_runs_new", "dag_runs")
    op.rename_table("repeats_new", "repeats")
    op.create_index("ix_dag_runs_measured_at", "dag_runs", ["measured_at"])
    op.create_index("ix_repeats_baseline", "repeats",
                    ["variant", "launcher", "environment"] + (["dag_id", "dag_run"] if with_dag_id else ["dag_run"]))
    if op.get_bind().dialect.name == "postgresql":  # copied ids: the new id sequence goes on after them
        op.execute("SELECT setval(pg_get_serial_sequence('repeats', 'id'), COALESCE(MAX(id), 0) + 1, false) "
                   "FROM repeats")


def upgrade():
    rebuild(with_dag_id=True)


def downgrade():
    # only possible while no run id is stored for two DAGs: the old key cannot hold both
    rebuild(with_dag_id=False)

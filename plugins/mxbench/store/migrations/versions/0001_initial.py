"""The results store's first tables: environments, dag_runs, variants, repeats.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "environments",
        sa.Column("fingerprint", sa.String(16), primary_key=True),
        sa.Column("gpu_model", sa.String(200)),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("driver", sa.String(50)),
        sa.Column("cuda", sa.String(50)),
        sa.Column("cpu_model", sa.String(200)),
        sa.Column("cpu_count", sa.Integer),
        sa.Column("host_class", sa.String(250), nullable=False),
        sa.Column("first_seen", sa.DateTime, nullable=False),
    )
    op.create_table(
        "dag_runs",
        sa.Column("run_id", sa.String(250), primary_key=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("logical_date", sa.DateTime),
        sa.Column("data_interval_start", sa.DateTime),
        sa.Column("data_interval_end", sa.DateTime),
        sa.Column("measured_at", sa.DateTime, nullable=False),
        sa.Column("mxnet_version", sa.String(50)),
        sa.Column("mxnet_package", sa.String(200)),
        sa.Column("mxnet_commit", sa.String(64)),
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
    )
    op.create_table(
        "variants",
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
    op.create_table(
        "repeats",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("dag_run", sa.String(250), sa.ForeignKey("dag_runs.run_id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_key", sa.String(300), nullable=False),
        sa.Column("variant", sa.String(200), sa.ForeignKey("variants.id"), nullable=False),
        sa.Column("launcher", sa.String(50), nullable=False),
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
        sa.UniqueConstraint("dag_run", "run_key", name="uq_repeats_dag_run_run_key"),
    )


def downgrade():
    for table in ("repeats", "variants", "dag_runs", "environments"):
        op.drop_table(table)

"""Which machine set a run used, which image a DAG run trained in, and the indexes baseline() needs.

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    # batch_alter_table: plain ALTER on PostgreSQL, a table copy where SQLite cannot ALTER
    with op.batch_alter_table("repeats") as batch:
        batch.add_column(sa.Column("machine_set", sa.String(100)))
        batch.create_index("ix_repeats_baseline", ["variant", "launcher", "environment", "dag_run"])
    with op.batch_alter_table("dag_runs") as batch:
        batch.add_column(sa.Column("image", sa.String(500)))
        batch.create_index("ix_dag_runs_measured_at", ["measured_at"])


def downgrade():
    with op.batch_alter_table("dag_runs") as batch:
        batch.drop_index("ix_dag_runs_measured_at")
        batch.drop_column("image")
    with op.batch_alter_table("repeats") as batch:
        batch.drop_index("ix_repeats_baseline")
        batch.drop_column("machine_set")

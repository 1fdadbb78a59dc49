"""What each run ran on: the MXNet build asked for, the version the trainer reported, and the
interpreter or image used.

A DAG run's ``mxnet_package`` says what was asked for; a run may still have trained on another
version (a venv or image that held something else), and the runs of one DAG run may have used
different interpreters or images. Rows stored before this revision keep NULL: what ran then is
known only at the DAG run's level (``dag_runs.mxnet_version``).

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    # batch_alter_table: plain ALTER on PostgreSQL, and on SQLite too for added columns
    with op.batch_alter_table("repeats") as batch:
        batch.add_column(sa.Column("mxnet_asked", sa.String(200)))  # "mxnet==1.9.0"
        batch.add_column(sa.Column("mxnet_reported", sa.String(50)))  # "1.9.0", as the trainer imported it
        batch.add_column(sa.Column("runtime", sa.String(1000)))  # the interpreter's path or the image


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        batch.drop_column("runtime")
        batch.drop_column("mxnet_reported")
        batch.drop_column("mxnet_asked")

"""What else used each run's hosts (``mxbench.results.contention``): the worst host's CPU
pressure, steal and CPU used by processes outside the run, and whether that made the run contended.
Rows stored before this revision keep NULL: not measured.

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = (("cpu_pressure", sa.Float), ("steal", sa.Float), ("foreign_cores", sa.Float), ("contended", sa.Boolean))


def upgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind))


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)

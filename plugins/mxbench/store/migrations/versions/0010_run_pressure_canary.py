"""What each run felt itself (``mxbench.results.contention``): the worst worker's CPU pressure in
its own cgroup and the slowest time of its canary workload, which A/A calibrations turn into the
hardware's own thresholds. Rows stored before this revision keep NULL: not measured.

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = (("run_pressure", sa.Float), ("canary_s", sa.Float))


def upgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind))


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)

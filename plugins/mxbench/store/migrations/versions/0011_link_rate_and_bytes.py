"""What each run's link was and carried (issue 44): the rate of the slowest link between its hosts
(bits/s, an ssh connection's ``mxbench_link_rate`` or ``mxbench_links``) and the bytes a step its
busiest host sent, so that the scaling model over the store learns the network term from stored
runs at two rates, as it does from one DAG run. Rows stored before this revision keep NULL.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMNS = (("link_bits", sa.Float), ("link_bytes_per_step", sa.Float))


def upgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind))


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)

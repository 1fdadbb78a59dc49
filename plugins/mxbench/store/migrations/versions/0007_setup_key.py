"""What each run measured: ``repeats.setup_key``, a digest of the variant's measured fields and the
data's kind (``mxbench.matrix.variants.measured_setup``), so that a baseline pools only runs of one
setup: a ``num_layers`` or ``epochs`` override keeps the variant id, not the key.

Rows stored before this revision keep NULL: the variants table holds one definition per id (the
last one recorded), so what an old run measured cannot be proven, and no baseline takes them.

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("repeats") as batch:
        batch.add_column(sa.Column("setup_key", sa.String(16)))
        batch.create_index("ix_repeats_setup_baseline",
                           ["variant", "launcher", "environment", "setup_key", "dag_id", "dag_run"])


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        batch.drop_index("ix_repeats_setup_baseline")
        batch.drop_column("setup_key")

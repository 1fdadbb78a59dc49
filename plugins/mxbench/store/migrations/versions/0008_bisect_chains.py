"""Bisect chains (``mxbench.store.bisect_chains``): which DAG runs belong to a bisect, proven by the
params digest each decided DAG run leaves for the next one.

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "bisect_chains",
        sa.Column("chain_id", sa.String(32), primary_key=True),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("starter_dag", sa.String(250), nullable=False),
        sa.Column("starter_run", sa.String(250), nullable=False),
        sa.Column("variant", sa.String(200), nullable=False),
        sa.Column("launcher", sa.String(50), nullable=False),
        sa.Column("good_build", sa.String(250), nullable=False),
        sa.Column("bad_build", sa.String(250), nullable=False),
        sa.Column("starter_kind", sa.String(20), nullable=False),
        sa.Column("salt", sa.String(32), nullable=False),
        sa.Column("decided", sa.Integer, nullable=False),
        sa.Column("expected_params", sa.String(64)),
        sa.Column("claimed", sa.Boolean, nullable=False),
        sa.Column("answered", sa.Boolean, nullable=False),
        sa.Column("last_decider", sa.String(250)),
        sa.Column("last_params", sa.String(64)),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_bisect_chains_range", "bisect_chains",
                    ["dag_id", "variant", "launcher", "good_build", "bad_build"])


def downgrade():
    op.drop_index("ix_bisect_chains_range", "bisect_chains")
    op.drop_table("bisect_chains")

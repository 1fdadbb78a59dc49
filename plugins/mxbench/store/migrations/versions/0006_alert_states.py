"""Alert triage: each alert's state (new, acknowledged, expected, distribution change), who set
it, why and when (``alerts``), and every change to it (``alert_changes``). An alert is a DAG run's
regression on one series: variant, launcher and kind of machine ("" for a run without one).

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _alert_columns():
    # a fresh list per table: a Column belongs to one table
    return [sa.Column("dag_id", sa.String(250), nullable=False), sa.Column("run_id", sa.String(250), nullable=False),
            sa.Column("variant", sa.String(200), nullable=False), sa.Column("launcher", sa.String(50), nullable=False),
            sa.Column("environment", sa.String(16), nullable=False)]


def upgrade():
    op.create_table(
        "alerts", *_alert_columns(),
        sa.Column("state", sa.String(30), nullable=False),
        sa.Column("level", sa.Float),
        sa.Column("changed_by", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("changed_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "run_id", "variant", "launcher", "environment"))
    op.create_index("ix_alerts_series", "alerts", ["variant", "launcher", "environment"])
    op.create_table(
        "alert_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True), *_alert_columns(),
        sa.Column("from_state", sa.String(30), nullable=False),
        sa.Column("to_state", sa.String(30), nullable=False),
        sa.Column("changed_by", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("changed_at", sa.DateTime, nullable=False))


def downgrade():
    op.drop_table("alert_changes")
    op.drop_index("ix_alerts_series", table_name="alerts")
    op.drop_table("alerts")

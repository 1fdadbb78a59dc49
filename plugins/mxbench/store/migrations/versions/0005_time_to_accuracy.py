"""Time to accuracy per run: the seconds of training until validation top-1 first reached the
preset's target, and that target.

``time_to_target_s`` is NULL when the run never reached the target (or had no validation data);
``target_accuracy`` says which target the run was measured against (NULL: the preset has none).
Rows stored before this revision keep NULL in both.

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("repeats") as batch:
        batch.add_column(sa.Column("target_accuracy", sa.Float))  # validation top-1, 0..1
        batch.add_column(sa.Column("time_to_target_s", sa.Float))  # summed epoch time costs; NULL: not reached


def downgrade():
    with op.batch_alter_table("repeats") as batch:
        batch.drop_column("time_to_target_s")
        batch.drop_column("target_accuracy")

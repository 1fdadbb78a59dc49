"""Alembic environment of the results store. Run through ``mxbench.store.migrate``, which hands
over an open connection (``config.attributes["connection"]``); a URL in the config also works."""
from alembic import context
from sqlalchemy import create_engine

config = context.config


def run_migrations(connection):
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead
    context.configure(connection=connection, target_metadata=None,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("the results store migrates online only: use mxbench.store.migrate(url)")

connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        run_migrations(connection)
        connection.commit()
    engine.dispose()

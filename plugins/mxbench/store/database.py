"""Where the results store is and how to reach it: its URL (``default_url``, an Airflow
connection's ``url_of_connection``), one engine per URL, and the Alembic migrations (``migrate``;
``ready_engine`` migrates once per process before a query)."""
import os
from functools import lru_cache
from pathlib import Path

import sqlalchemy as sa

from mxbench import config
from mxbench.store.store_errors import UNSHOWN, StoreError, first_line, shown, without_password

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
URL_ENV = "MXBENCH_RESULTS_URL"


def default_url() -> str:
    return os.environ.get(URL_ENV) or f"sqlite:///{config.home() / 'results.db'}"


def url_of_connection(uri: str) -> str:
    """An Airflow connection URI as SQLAlchemy takes it: ``postgres://`` (Airflow's spelling) and
    ``postgresql://`` become ``postgresql+psycopg2://``; Airflow's ``__extra__`` query is dropped."""
    try:
        url = sa.engine.make_url(uri)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results connection's URI is not a database URL: {UNSHOWN}") from None
    if url.drivername in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg2")
    return url.difference_update_query(["__extra__"]).render_as_string(hide_password=False)


def engine_name(url: str) -> str:
    """The kind of database only (sqlite, postgresql), for pages that must not show where it is."""
    try:
        return sa.engine.make_url(url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError):
        return "an invalid URL"


@lru_cache(maxsize=None)
def engine(url: str) -> sa.engine.Engine:
    """One engine per URL for the process (its pool makes repeated queries cheap)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"the results store's URL is not a database URL ({UNSHOWN})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    try:
        made = sa.create_engine(parsed)
    except Exception as exc:  # an unknown dialect or a missing driver
        raise StoreError(without_password(f"cannot use the results store at {shown(url)}: {exc}", url)) from None
    if parsed.get_backend_name() == "sqlite":
        @sa.event.listens_for(made, "connect")
        def _enforce_foreign_keys(dbapi_connection, _record):  # SQLite ignores them unless asked
            dbapi_connection.execute("PRAGMA foreign_keys=ON")
    return made


def alembic_config(connection=None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(url: str) -> str:
    """Upgrade the database to the newest revision (nothing to do if it is there); that revision."""
    from alembic import command
    from alembic.script import ScriptDirectory

    cfg = alembic_config()
    try:
        with engine(url).begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
    except sa.exc.OperationalError as exc:
        raise StoreError(without_password(f"cannot reach the results store at {shown(url)}: {first_line(exc)}",
                                          url)) from None
    return ScriptDirectory.from_config(cfg).get_current_head()


@lru_cache(maxsize=None)
def ready_engine(url: str) -> sa.engine.Engine:
    migrate(url)
    return engine(url)

"""A real PostgreSQL server in a folder of its own, on a free loopback port with trust
authentication: the results store's tests and the benchmarks' throwaway database server.

    pg_ctl, data, port = start(data_root)   # data_root/pg; as root the server runs as postgres
    try:
        ... url(port) ...                       # the "postgres" database
        ... create_database(url(port), "bench") ...   # a new one: its URL
    finally:
        stop(pg_ctl)
"""
import os
import shutil
import subprocess
from pathlib import Path

from mxbench_train.localhost import free_port


def bin_dir():
    """The folder holding initdb and pg_ctl: PATH, else the newest /usr/lib/postgresql/*/bin;
    None when PostgreSQL is not installed."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return versions[-1].parent if versions else None


def start(data_root: Path):
    """initdb + pg_ctl start in ``data_root/pg`` on a free loopback port; (pg_ctl argv prefix,
    data dir, port). As root the server runs as the ``postgres`` user (initdb and postgres refuse
    root). Raises RuntimeError saying why it could not."""
    found = bin_dir()
    if found is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb on PATH or under /usr/lib/postgresql/*/bin): "
                           "scripts/setup.sh --tests installs it when run as root")
    data = data_root / "pg"
    data.mkdir()
    as_user = []
    if os.geteuid() == 0:
        import pwd

        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root, but there is no postgres user to run the server as") from None
        for folder in (data_root, data):
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    done = subprocess.run([*as_user, str(found / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                           "--no-sync"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {done.stderr.strip()[-1000:]}")
    port = free_port()
    pg_ctl = [*as_user, str(found / "pg_ctl"), "-D", str(data)]
    done = subprocess.run([*pg_ctl, "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {data}",
                           "-l", str(data / "log"), "-w", "start"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        log = (data / "log").read_text()[-1000:] if (data / "log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()[-500:]} {log}")
    return pg_ctl, data, port


def url(port: int, database: str = "postgres") -> str:
    """The SQLAlchemy URL of ``database`` on the server at ``port``, as its ``postgres`` user."""
    return f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}"


def create_database(server_url, name: str) -> str:
    """CREATE DATABASE ``name`` on the server of ``server_url`` (a string or SQLAlchemy URL of any
    database there, as a user who may create databases); the new database's URL: ``server_url``
    with ``name`` for its database."""
    import sqlalchemy as sa  # not at module level: starting a server needs no SQLAlchemy

    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return sa.engine.make_url(server_url).set(database=name).render_as_string(hide_password=False)


def stop(pg_ctl) -> None:
    """Stop the server; "-m fast" ends client connections too, so pooled ones cannot hold it up."""
    subprocess.run([*pg_ctl, "stop", "-m", "fast", "-w"], capture_output=True, text=True, timeout=120)

"""Airflow's ``[core] hostname_callable`` for the test stack's workers: two Celery workers on one
machine would otherwise both record this machine's FQDN as a task instance's ``hostname``, and a
test could not tell which worker ran what. Configured as ``standins.worker_hostname.hostname``
(Airflow imports a dotted path, "package.function", and calls it with no argument); the worker's
environment gives the name in MXBENCH_TEST_HOSTNAME."""
import os

SETTING = "MXBENCH_TEST_HOSTNAME"


def hostname() -> str:
    name = os.environ.get(SETTING)
    if not name:
        # a worker without its name would silently pass as another: refuse instead
        raise RuntimeError(f"{SETTING} is not set: the test stack gives each worker its own name")
    return name

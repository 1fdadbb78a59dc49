"""The DAGs' trigger forms as Airflow Params, with the deployment's settings in them: the quiet
check's default wait is Airflow's ``[mxbench] quiet_wait_s`` (``AIRFLOW__MXBENCH__QUIET_WAIT_S``,
default 60). Read where a DAG file is parsed: no I/O beyond Airflow's own configuration."""
from typing import Dict, Mapping

from mxbench.matrix.params import DEFAULT_QUIET_WAIT_S, with_quiet_wait

# The forms' JSON Schema dialect. Airflow checks a Param's schema against its dialect's metaschema
# each time it resolves the Param, and serializing a DAG resolves every Param once or more per task:
# under jsonschema's default dialect (2020-12) those checks were most of serializing these DAGs, paid
# on every parse of a DAG file and at each dag.test(). The forms use draft-07 keywords only, and
# draft-07's metaschema checks faster: serializing the three DAGs took 0.39 of the time
# (benchmarks/dag_serialization.py; tests/dags/test_dag_integrity.py holds the forms to draft-07).
SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


def form_params(schema: Mapping[str, dict]) -> Dict[str, object]:
    """``schema`` (``matrix.params``) as the ``params`` of a DAG, its ``quiet_wait_s`` default the
    deployment's. A setting that is no whole number of seconds from 0 to 1800 fails the DAG's
    parse, naming the setting, rather than every DAG run's form."""
    from airflow.configuration import conf
    from airflow.sdk import Param

    raw = conf.get("mxbench", "quiet_wait_s", fallback=str(DEFAULT_QUIET_WAIT_S))
    try:
        form = with_quiet_wait(schema, int(raw))
    except ValueError as exc:
        raise ValueError(f"[mxbench] quiet_wait_s (AIRFLOW__MXBENCH__QUIET_WAIT_S) is {raw!r}: {exc}") from None
    return {name: Param(**spec, **{"$schema": SCHEMA_DIALECT}) for name, spec in form.items()}

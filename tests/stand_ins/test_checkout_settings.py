"""The Airflow settings of a checkout are written once (config/airflow-checkout.env): the demo's shell
and the tests' stacks read the same values from it."""
import os
import subprocess

from conftest import REPO
from standins.airflow_stack import checkout_env, checkout_settings


def test_the_demo_shell_and_the_stacks_set_the_same_airflow_settings(tmp_path):
    sourced = subprocess.run(["bash", "-c", "set -euo pipefail; source scripts/airflow-env.sh; env -0"], cwd=REPO,
                             env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    shell = dict(line.partition("=")[::2] for line in sourced.split("\0") if line)
    settings = checkout_settings()
    assert settings == {"AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
                        "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    assert {key: shell.get(key) for key in settings} == settings
    assert {key: os.environ[key] for key in settings} == settings  # this test session's own (conftest.py)
    assert checkout_env(tmp_path, tmp_path / "airflow")["AIRFLOW_HOME"] == str(tmp_path / "airflow")

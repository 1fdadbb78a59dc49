"""Airflow plugin: the mxbench pages in the Airflow UI (their app is mxbench.airflow_glue.web).

"Benchmark report" is a tab on every DAG run (it answers for mxbench_benchmark,
mxbench_regression and mxbench_bisect runs); "Benchmark history" is in the navigation bar. Both show inside the UI,
in a frame of the api-server's own /mxbench pages, so the UI's login cookie goes with them.

Airflow finds it through the ``airflow.plugins`` entry point of the installed mxbench (pyproject.toml);
``plugins/mxbench_ui.py`` offers it from a plugins folder only where that entry point is missing.
"""
from airflow.plugins_manager import AirflowPlugin

from mxbench.airflow_glue.web import app


class MxbenchUIPlugin(AirflowPlugin):
    name = "mxbench"
    fastapi_apps = [{"app": app, "url_prefix": "/mxbench", "name": "mxbench reports"}]
    # hrefs without a leading slash: relative to the UI's base URL, which may have a path
    external_views = [
        {"name": "Benchmark report", "href": "mxbench/report/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": "benchmark-report"},
        {"name": "Benchmark history", "href": "mxbench/history", "destination": "nav",
         "url_route": "benchmark-history"},
    ]

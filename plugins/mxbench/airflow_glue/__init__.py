"""The Airflow glue: the DAGs' tasks, the run operator, connections, notifiers and the UI's app.

The only modules of mxbench that import ``airflow``, ``artifacts.object_store`` aside
(tests/orchestration/test_layers.py holds that)."""

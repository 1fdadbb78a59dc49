"""The stages over a DAG run's folder, called by the Airflow tasks and needing no Airflow: expand,
prepare data, run, parse, join; the stop rule, what failed, the regression check."""

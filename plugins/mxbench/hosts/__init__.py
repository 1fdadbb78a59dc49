"""What makes a host a poor benchmark host, and waiting for it to be quiet: ``quiet_gate`` (the run task's
wait before each run, and how a host's reading is judged) and ``doctor`` (``mxbench doctor``: this
machine's settings and load, each with its fix). No Airflow, no pandas."""

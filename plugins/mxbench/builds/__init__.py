"""MXNet builds: the versions manifest, a venv per build, the build record the DAG hands around,
which build a run asked for and which ran, and pruning the caches."""

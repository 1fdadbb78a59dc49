"""MXNet builds: the versions manifest, a venv per build, which build a run asked for and which ran,
and pruning the caches."""

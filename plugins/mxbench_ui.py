"""The mxbench UI plugin (``mxbench.airflow_glue.ui_plugin``) for a plugins folder, where the installed mxbench
does not register it itself.

An installed mxbench (a wheel, or the editable install of scripts/setup.sh) registers the plugin through its
``airflow.plugins`` entry point, which Airflow loads after the plugins folder; offering it here as well would
load it twice (Airflow skips the second and reports it as an import error). So this file offers it only when
no installed distribution names it in that group: an older install, or mxbench on the path by other means.
"""
from importlib.metadata import entry_points

PLUGIN = "mxbench.airflow_glue.ui_plugin:MxbenchUIPlugin"

if not any(entry.value == PLUGIN for entry in entry_points(group="airflow.plugins")):
    from mxbench.airflow_glue.ui_plugin import MxbenchUIPlugin  # noqa: F401  (Airflow finds it by its type)

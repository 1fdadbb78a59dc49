"""The artifact store: where DAG runs' files and the prepared data sets are published, so that
tasks on different Airflow workers (Celery or Kubernetes executor, no shared disk) see each
other's work. One base URL, ``MXBENCH_ARTIFACTS``, read through Airflow's own object storage
(``ObjectStoragePath``, over fsspec): ``s3://<conn id>@<bucket>/<prefix>`` takes its credentials
from that Airflow connection; gs:// and abfs:// work the same way through their providers.

Layout under the base (a DAG run's own folder is ``run_folder.DagRunFolder``'s layout, published)::

    runs/<dag run>/request.json, data.json, stages.json, stored.json   one object each, replaced whole
    runs/<dag run>/tables/<name>.csv               likewise
    runs/<dag run>/<key>/...  attempts/<key>.<n>/...                   the unit of run <key>
    runs/<dag run>/report/...                      the unit "report"
    runs/<dag run>/manifests/<unit>.json           a unit's manifest, written last
    data/<rec-...>/...  data/manifests/<rec-...>.json                  prepared data sets

A unit is published file by file and its manifest (files, sizes, sha256) last; a reader takes
only what a manifest lists and checks each file against it, so it never reads half a publish: no
manifest, no result yet. A retry republishes its unit: idempotent, no lock across workers.

The default, ``file://$MXBENCH_HOME``, is this machine's own folder (``Store.is_home``): tasks
work in it directly and nothing is copied or hashed, as before there was a store.

The modules: ``object_store`` (``Store``, its units and manifests), ``workspace`` (a DAG run's
folder for one task: ``dag_run``, ``run_folder``), ``prepared_data`` (``publish_data``,
``local_data``) and ``published_runs`` (``read_report``, ``download``). Import them from here.
"""
from mxbench.artifacts.object_store import SETTING, Store, base_url, files_under, listing, object_of
from mxbench.artifacts.prepared_data import DATA_FILES, fetch_published_data, local_data, publish_data
from mxbench.artifacts.published_runs import download, published_folder, published_paths, read_report
from mxbench.artifacts.workspace import (
    DAG_FILES,
    RunSpace,
    Workspace,
    dag_run,
    dag_run_name,
    leftover,
    published,
    run_folder,
    run_scratch,
    run_units,
)

__all__ = ["DAG_FILES", "DATA_FILES", "SETTING", "RunSpace", "Store", "Workspace", "base_url", "dag_run",
           "dag_run_name", "download", "fetch_published_data", "files_under", "leftover", "listing", "local_data",
           "object_of", "publish_data", "published", "published_folder", "published_paths", "read_report",
           "run_folder", "run_scratch", "run_units"]

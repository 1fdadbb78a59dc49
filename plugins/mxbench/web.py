"""The mxbench pages of the Airflow UI: a FastAPI app that the api-server mounts at ``/mxbench``
(registered by ``plugins/mxbench_ui.py``).

    GET /mxbench/report/<dag id>/<run id>   that DAG run's report (the report task's report.html)
    GET /mxbench/history                    throughput per variant over DAG runs and MXNet builds

Each answers only users whom Airflow's auth manager lets read the DAG's runs: no token or
login cookie -> 401 (an invalid one: 403, Airflow's own rule), no access -> 403. A run id reaches
the file system only after Airflow's database has that DAG run, and only through
``config.existing_dag_run_dir`` (the pipeline's own mapping, which also finds a folder written
under the name older versions gave it); the file must resolve inside
``$MXBENCH_HOME/runs`` and belong to that DAG. With object storage as the artifact store
(``MXBENCH_ARTIFACTS``), the report is read from there instead, under the same mapping, as its
manifest lists it. The pages run no script: their Content-Security-Policy
allows none, so nothing written into a report can act as the logged-in user.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, Optional

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import config

# Airflow's api-server modules are imported inside the functions: every Airflow process that
# loads plugins (each task's, too) imports this module, and only the api-server needs them.

DAG_IDS = ("mxbench_benchmark", "mxbench_regression")

log = logging.getLogger(__name__)
# no /openapi.json, /docs or /redoc: they would answer without Airflow's auth, and nobody needs them
app = FastAPI(title="mxbench", description="Benchmark reports and history for the mxbench DAGs",
              openapi_url=None, docs_url=None, redoc_url=None)
# inline styles and data: images only; no script, no fetch, no form
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'self'; form-action 'none'"


@app.middleware("http")
async def locked_down(request: Request, call_next):
    response = await call_next(request)
    response.headers["Content-Security-Policy"] = POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def page(title: str, text: str, status: int = 200) -> HTMLResponse:
    from .report import render_page

    return HTMLResponse(render_page(title, [], [(title, text)], []), status_code=status)


@app.exception_handler(StarletteHTTPException)  # FastAPI's and routing's (an unknown path) alike
async def error_page(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
    """Errors as a page: they are read in the UI's frame, by people."""
    response = page(f"mxbench: {exc.status_code}", str(exc.detail), exc.status_code)
    response.headers.update(exc.headers or {})
    return response


async def current_user(request: Request, credentials: Annotated[Optional[HTTPAuthorizationCredentials],
                                                                 Depends(HTTPBearer(auto_error=False))]):
    """The request's Airflow user, found as the api-server's own routes find it: a bearer token,
    else the UI's login cookie. None valid: 401."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, credentials)


def may_read(user, dag_id: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` read the DAG runs of ``dag_id``."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    return get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, user=user,
        details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)))


def dag_run_state(dag_id: str, run_id: str) -> Optional[str]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def report_file(dag_id: str, run_id: str) -> Optional[Path]:
    """The report of DAG run ``run_id`` of ``dag_id`` where the pipeline writes it; None where that
    is not a file inside ``$MXBENCH_HOME/runs`` (a folder swapped for a link elsewhere, say), or the
    folder is another DAG's (run ids are unique per DAG only; folders made before request.json
    named their DAG are taken as they are)."""
    runs = (config.home() / "runs").resolve()
    folder = config.existing_dag_run_dir(dag_id, run_id).resolve()
    path = folder / "report" / "report.html"
    if runs not in path.resolve().parents or not path.is_file():
        return None
    try:
        owner = json.loads((folder / "request.json").read_text(encoding="utf-8")).get("dag_id")
    except (OSError, ValueError, AttributeError):
        owner = None
    return path.resolve() if owner in (None, dag_id) else None


@app.get("/report/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def report(dag_id: str, run_id: str, user: Annotated[Any, Depends(current_user)]) -> HTMLResponse:
    if not may_read(user, dag_id):
        raise HTTPException(403, f"You may not read the runs of {dag_id}")
    if dag_id not in DAG_IDS:
        raise HTTPException(404, f"{dag_id} is not an mxbench DAG: it has no benchmark report")
    state = dag_run_state(dag_id, run_id)
    if state is None:
        raise HTTPException(404, f"{dag_id} has no DAG run {run_id!r}")
    body = published_report(dag_id, run_id)
    if body is None:
        raise HTTPException(404, f"DAG run {run_id} of {dag_id} ({state}) has no report yet: its report task "
                                 "writes one when the runs are done")
    return HTMLResponse(body)


def published_report(dag_id: str, run_id: str) -> Optional[str]:
    """The DAG run's report.html from the artifact store (this machine's MXBENCH_HOME by default,
    read as a folder: ``report_file``); None when there is none yet. A store that cannot be read
    answers 503, its cause in the api-server's log."""
    from mxbench_train.errors import MxbenchError

    from . import artifacts

    try:
        store = artifacts.Store()
        if store.is_home:
            path = report_file(dag_id, run_id)
            return None if path is None else path.read_text(encoding="utf-8")
        body = artifacts.read_report(dag_id, run_id, store)
    except (MxbenchError, OSError) as exc:
        log.error("mxbench report: the artifact store cannot be read: %s", exc)
        raise HTTPException(503, "The artifact store cannot be read; the api-server's log says why") from None
    return None if body is None else body.decode("utf-8", "replace")


@app.get("/history", response_class=HTMLResponse)
def history(user: Annotated[Any, Depends(current_user)]) -> HTMLResponse:
    import pandas as pd

    from . import store
    from .regression import judge_history
    from .report import history_page

    dag_ids = [dag_id for dag_id in DAG_IDS if may_read(user, dag_id)]
    if not dag_ids:
        raise HTTPException(403, f"You may not read the runs of {' or '.join(DAG_IDS)}")
    url = store.default_url()
    try:
        rows = store.read_history(url)
    except store.StoreError as exc:
        log.error("mxbench history: the results store %s cannot be read: %s", store.shown(url), exc)
        raise HTTPException(503, "The results store cannot be read; the api-server's log says why") from None
    # judged over every stored run, as the regression DAG judges, then shown for the readable DAGs
    rows = judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True)))
    source = f"the results store ({store.engine_name(url)})"
    return HTMLResponse(history_page(rows[rows["dag_id"].isin(dag_ids)], source))

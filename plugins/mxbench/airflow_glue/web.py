"""The mxbench pages of the Airflow UI: a FastAPI app that the api-server mounts at ``/mxbench``
(registered by ``mxbench.airflow_glue.ui_plugin``).

    GET /mxbench/report/<dag id>/<run id>   that DAG run's report (the report task's report.html)
    GET /mxbench/run-files?dag_id=&run_id=&run=        one run's record and logs, listed (the report's links)
    GET /mxbench/run-file?dag_id=&run_id=&run=&file=   one of them, as plain text
    GET /mxbench/history                    throughput per variant over DAG runs and MXNet builds
    POST /mxbench/history/alerts            set a regression alert's triage state (``mxbench.regression.triage``)

Each answers only users whom Airflow's auth manager lets read the DAG's runs: no token or
login cookie -> 401 (an invalid one: 403, Airflow's own rule), no access -> 403. A run id reaches
the file system only after Airflow's database has that DAG run, and only through
``config.existing_dag_run_dir`` (the pipeline's own mapping, which also finds a folder written
under the name older versions gave it); the file must resolve inside
``$MXBENCH_HOME/runs`` and belong to that DAG. A run's files are served only for a run that its DAG
run's request.json lists, and only its record (meta.json) and logs (``rank*.log``, ``roles/*.log``),
each resolved inside that run's folder: no other name, no ``..``, no link out. With object storage
as the artifact store (``MXBENCH_ARTIFACTS``), the report is read from there instead, under the
same mapping, as its manifest lists it (a run's files are not served then: ``mxbench fetch``).
The pages run no script: their Content-Security-Policy
allows none, so nothing written into a report can act as the logged-in user.

Triage is the one write: only users whom the auth manager lets edit the alert's DAG's runs
(``is_authorized_dag`` with PUT) may set a state, and only from this app's own pages. A browser
sends the login cookie with any site's forms, so a cookie-authenticated write must carry the
page's form token (an HMAC of the user and an expiry, keyed on the api-server's secret), and is
refused when the browser says it came from another site (Sec-Fetch-Site, Origin). A bearer token
in the Authorization header (API clients) needs no form token: no other site can set that header.
Each change is recorded in the store (who, from, to, why, when) and logged.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import time
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Optional

from fastapi import Depends, FastAPI, Form, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from mxbench import config
from mxbench.run_folder import DagRunFolder, RunFolder
from mxbench_train import json_input

# Airflow's api-server modules are imported inside the functions: every Airflow process that
# loads plugins (each task's, too) imports this module, and only the api-server needs them.

DAG_IDS = ("mxbench_benchmark", "mxbench_regression")  # with history and alerts
REPORT_DAG_IDS = (*DAG_IDS, "mxbench_bisect")  # with a report

log = logging.getLogger(__name__)
# no /openapi.json, /docs or /redoc: they would answer without Airflow's auth, and nobody needs them
app = FastAPI(title="mxbench", description="Benchmark reports and history for the mxbench DAGs",
              openapi_url=None, docs_url=None, redoc_url=None)
# inline styles and data: images only; no script, no fetch; forms post to this origin only (triage)
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; frame-ancestors 'self'; form-action 'self'"
FORM_TOKEN_LIFETIME_S = 12 * 3600  # a history page left open for a working day still posts


@app.middleware("http")
async def locked_down(request: Request, call_next):
    response = await call_next(request)
    response.headers["Content-Security-Policy"] = POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def one_line(text) -> str:
    """``text`` with what is not printable (line breaks, escape sequences) escaped, for the log: a
    value from a form or a request never starts a line of its own there."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def page(title: str, text: str, status: int = 200) -> HTMLResponse:
    from mxbench.report import render_page

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
    return authorized(user, dag_id, "GET")


def may_edit(user, dag_id: str) -> bool:
    """Whether the auth manager lets ``user`` change the DAG runs of ``dag_id``: who may triage their alerts."""
    return authorized(user, dag_id, "PUT")


def authorized(user, dag_id: str, method: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    return get_auth_manager().is_authorized_dag(
        method=method, access_entity=DagAccessEntity.RUN, user=user,
        details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)))


def form_secret() -> Optional[bytes]:
    """The key of the triage form's token: a secret the api-server already has ([api_auth]
    jwt_secret, else [api] secret_key); None when it has neither (the page then shows no forms)."""
    from airflow.configuration import conf

    secret = conf.get("api_auth", "jwt_secret", fallback="") or conf.get("api", "secret_key", fallback="")
    return secret.encode() if secret else None


def own_hosts(request: Request) -> set:
    """The host[:port] names this api-server answers as: the request's Host, and that of [api]
    base_url (what browsers see behind a proxy that rewrites Host)."""
    from airflow.configuration import conf

    base = urllib.parse.urlsplit(conf.get("api", "base_url", fallback="") or "").netloc
    return {host for host in (request.headers.get("host", ""), base) if host}


def _signature(user_id: str, expires: int, secret: bytes) -> str:
    return hmac.new(secret, f"mxbench-triage\0{user_id}\0{expires}".encode(), hashlib.sha256).hexdigest()


def form_token(user_id: str, secret: bytes, now: Optional[float] = None) -> str:
    """The token the history page puts in its triage forms for ``user_id``: "<expiry>.<HMAC>"."""
    expires = int(now if now is not None else time.time()) + FORM_TOKEN_LIFETIME_S
    return f"{expires}.{_signature(user_id, expires, secret)}"


def valid_form_token(token: str, user_id: str, secret: bytes, now: Optional[float] = None) -> bool:
    """Whether ``token`` is one ``form_token`` made for ``user_id`` and it has not expired."""
    expires, _, signature = (token or "").partition(".")
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    if not (expires.isascii() and expires.isdigit()) or int(expires) < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(signature.encode(), _signature(user_id, int(expires), secret).encode())


def cross_site(headers, hosts: set) -> Optional[str]:
    """Why a request came from another site, as the browser tells (Sec-Fetch-Site, Origin; ``hosts``:
    ``own_hosts``); None when nothing says so (API clients send neither)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"Sec-Fetch-Site is {site}"
    origin = headers.get("origin")
    if origin is not None and urllib.parse.urlsplit(origin).netloc not in hosts:
        return f"it came from {origin}"
    return None


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
    folder = dag_run_folder(dag_id, run_id)
    path = None if folder is None else DagRunFolder(folder).report_html.resolve()
    runs = (config.home() / "runs").resolve()
    return path if path is not None and runs in path.parents and path.is_file() else None


def dag_run_folder(dag_id: str, run_id: str) -> Optional[Path]:
    """The DAG run's folder, resolved, as ``report_file`` takes it: inside ``$MXBENCH_HOME/runs``
    and not another DAG's; None otherwise."""
    runs = (config.home() / "runs").resolve()
    folder = config.existing_dag_run_dir(dag_id, run_id).resolve()
    if runs not in folder.parents:
        return None
    try:
        owner = json_input.loads(DagRunFolder(folder).request.read_text(encoding="utf-8")).get("dag_id")
    except (OSError, ValueError, AttributeError):
        owner = None
    return folder if owner in (None, dag_id) else None


def run_folder_of(dag_folder: Path, key: str) -> Optional[Path]:
    """The folder of run ``key`` of a DAG run, resolved: only a run its request.json lists, and
    only inside the DAG run's folder; None otherwise."""
    try:
        request = json_input.loads(DagRunFolder(dag_folder).request.read_text(encoding="utf-8"))
        keys = {run.get("key") for run in request.get("runs") or []}
    except (OSError, ValueError, AttributeError):
        return None
    if key not in keys or key in ("", ".", "..") or "/" in key or "\\" in key:
        return None
    path = DagRunFolder(dag_folder).run(key).path.resolve()
    return path if dag_folder in path.parents and path.is_dir() else None


def run_evidence_files(run_dir: Path) -> list:
    """What ``run-file`` serves of a run (``run_dir``: resolved), relative to its folder: its record,
    then its logs."""
    run = RunFolder(run_dir)
    found = [run.meta] if run.meta.is_file() else []
    found += sorted(run_dir.glob(RunFolder.WORKER_LOGS)) + run.role_logs()
    # a link out (never made by a launcher) is not the run's
    return [path.relative_to(run_dir).as_posix() for path in found
            if run_dir in path.resolve().parents and path.resolve().is_file()]


def evidence_file(run_dir: Path, name: str) -> Optional[Path]:
    """``name`` in the run's folder when it is one ``run_evidence_files`` lists (no other name, no
    ``..``, nothing that resolves outside the run's folder); None otherwise."""
    if name not in run_evidence_files(run_dir):
        return None
    path = (run_dir / name).resolve()
    return path if run_dir in path.parents and path.is_file() else None


def readable_run(user, dag_id: str, run_id: str, key: str) -> Path:
    """The run's folder for a reader of its files, checked as the report is: the auth manager
    lets ``user`` read the DAG's runs (else 403), it is an mxbench DAG and Airflow has that DAG
    run (else 404), and the run is one of its request's, in its folder (else 404)."""
    from mxbench import artifacts
    from mxbench_train.errors import MxbenchError

    if not may_read(user, dag_id):
        raise HTTPException(403, f"You may not read the runs of {dag_id}")
    if dag_id not in REPORT_DAG_IDS:
        raise HTTPException(404, f"{dag_id} is not an mxbench DAG: it has no runs to show")
    if dag_run_state(dag_id, run_id) is None:
        raise HTTPException(404, f"{dag_id} has no DAG run {run_id!r}")
    try:
        home = artifacts.Store().is_home
    except (MxbenchError, OSError) as exc:
        log.error("mxbench run files: the artifact store cannot be read: %s", exc)
        raise HTTPException(503, "The artifact store cannot be read; the api-server's log says why") from None
    if not home:
        raise HTTPException(404, "With object storage as the artifact store, a run's files are not served here: "
                                 "`mxbench fetch DAG_ID RUN_ID --to DIR` brings the DAG run's files")
    dag_folder = dag_run_folder(dag_id, run_id)
    run_dir = None if dag_folder is None else run_folder_of(dag_folder, key)
    if run_dir is None:
        raise HTTPException(404, f"DAG run {run_id} of {dag_id} has no run {key!r}")
    return run_dir


@app.get("/run-files", response_class=HTMLResponse)
def run_files(dag_id: str, run_id: str, run: str, user: Annotated[Any, Depends(current_user)]) -> HTMLResponse:
    """A run's record and logs, each a link to ``run-file``: a failed or contended run's evidence."""
    import pandas as pd

    from mxbench.report import render_page
    from mxbench.report.links import Links, run_files_href

    run_dir = readable_run(user, dag_id, run_id, run)
    files = pd.DataFrame([{"file": Links(name, [(name, run_files_href(dag_id, run_id, run, name, base=""))]),
                           "bytes": f"{(run_dir / name).stat().st_size:,}"} for name in run_evidence_files(run_dir)])
    title = f"mxbench: run {run} of DAG run {run_id} ({dag_id})"
    return HTMLResponse(render_page(title, [], [("Record and logs", files)], []))


@app.get("/run-file")
def run_file(dag_id: str, run_id: str, run: str, file: str, user: Annotated[Any, Depends(current_user)]):
    """One of a run's files (``run_evidence_files``), as plain text."""
    path = evidence_file(readable_run(user, dag_id, run_id, run), file)
    if path is None:
        raise HTTPException(404, f"Run {run} of DAG run {run_id} has no record or log {file!r}")
    return FileResponse(path, media_type="text/plain; charset=utf-8")


@app.get("/report/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def report(dag_id: str, run_id: str, user: Annotated[Any, Depends(current_user)]) -> HTMLResponse:
    if not may_read(user, dag_id):
        raise HTTPException(403, f"You may not read the runs of {dag_id}")
    if dag_id not in REPORT_DAG_IDS:
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
    from mxbench import artifacts
    from mxbench_train.errors import MxbenchError

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
    """The history page; editors of a DAG get a triage form on each of its alerts."""
    import pandas as pd

    from mxbench import store
    from mxbench.regression.regression_rule import judge_history
    from mxbench.report import history_page

    dag_ids = [dag_id for dag_id in DAG_IDS if may_read(user, dag_id)]
    if not dag_ids:
        raise HTTPException(403, f"You may not read the runs of {' or '.join(DAG_IDS)}")
    url = store.default_url()
    try:
        rows = store.read_history(url)
        alerts = store.read_alerts(url)
        sizes = store.read_sizes(url)
        names = store.machine_names(url)
    except store.StoreError as exc:
        log.error("mxbench history: the results store %s cannot be read: %s", store.shown(url),
                  store.without_password(str(exc), url))
        raise HTTPException(503, "The results store cannot be read; the api-server's log says why") from None
    # judged as the regression DAG judges (over MXBENCH_BASELINE_DAGS' quiet runs: judge_history; a
    # bisect's probes measure old builds on purpose: not history), then shown for the readable DAGs
    rows = rows[rows["dag_id"].isin(DAG_IDS)]
    rows = judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True)))
    source = f"the results store ({store.engine_name(url)})"
    editable = [dag_id for dag_id in dag_ids if may_edit(user, dag_id)]
    secret = form_secret() if editable else None
    token = form_token(user.get_id(), secret) if secret else None
    return HTMLResponse(history_page(rows[rows["dag_id"].isin(dag_ids)], source, alerts=alerts, editable=editable,
                                     form_token=token, sizes=sizes, names=names))


async def writer(request: Request, credentials: Annotated[Optional[HTTPAuthorizationCredentials],
                                                           Depends(HTTPBearer(auto_error=False))]):
    """The user of a write, and whether a bearer token (not the login cookie) named them."""
    return await current_user(request, credentials), credentials is not None


@app.post("/history/alerts")
def set_alert(request: Request, who: Annotated[tuple, Depends(writer)], dag_id: Annotated[str, Form()],
              run_id: Annotated[str, Form()], variant: Annotated[str, Form()], launcher: Annotated[str, Form()],
              state: Annotated[str, Form()], environment: Annotated[str, Form()] = "",
              reason: Annotated[str, Form()] = "", token: Annotated[str, Form()] = ""):
    """Set an alert's triage state (the history page's form, or an API client with a bearer token);
    303 back to the history page."""
    from mxbench import store
    from mxbench.regression import triage

    user, by_header = who
    if not by_header:  # the login cookie: a browser, which any site's form can make post
        refused = cross_site(request.headers, own_hosts(request))
        if refused:
            raise HTTPException(403, f"Refused a triage change from another site: {refused}")
        secret = form_secret()
        if not secret or not valid_form_token(token, user.get_id(), secret):
            raise HTTPException(403, "The triage form's token is missing, expired or not yours: reload the history "
                                     "page and set the state again")
    if dag_id not in DAG_IDS:
        raise HTTPException(404, f"{dag_id} is not an mxbench DAG: it has no alerts")
    if not may_edit(user, dag_id):
        raise HTTPException(403, f"You may not change the runs of {dag_id}, so not triage their alerts")
    url = store.default_url()
    try:
        row = store.set_alert_state(url, dag_id, run_id, variant, launcher, environment, state, user.get_name(),
                                    reason)
    except triage.TriageError as exc:
        raise HTTPException(400, f"{variant} ({launcher}) in DAG run {run_id}: {exc}") from None
    except store.NoSuchAlert as exc:
        raise HTTPException(404, str(exc)) from None
    except store.ConcurrentChange as exc:
        raise HTTPException(409, str(exc)) from None
    except store.StoreError as exc:
        log.error("mxbench triage: the results store %s cannot be written: %s", store.shown(url),
                  store.without_password(str(exc), url))
        raise HTTPException(503, "The results store cannot be written; the api-server's log says why") from None
    log.info("mxbench triage: %s set %s (%s, machine %s) of %s/%s to %s: %s",
             *map(one_line, (user.get_name(), variant, launcher, environment or "none", dag_id, run_id, state,
                             row["reason"])))
    # relative: right behind any prefix the api-server is served under
    return RedirectResponse("../history", status_code=303)

"""The mxbench pages of the Airflow UI: a FastAPI app that the api-server mounts at ``/mxbench``
(registered by ``mxbench.airflow_glue.ui_plugin``).

    GET /mxbench/report/<dag id>/<run id>   that DAG run's report (the report task's report.html)
    GET /mxbench/run-files?dag_id=&run_id=&run=        one run's record and logs, listed (the report's links)
    GET /mxbench/run-file?dag_id=&run_id=&run=&file=   one of them, as plain text
    GET /mxbench/history                    throughput per variant over DAG runs and MXNet builds
    POST /mxbench/history/alerts            set a regression alert's triage state (``mxbench.regression.triage``)

This module holds the app and its routes; who is asking and what they may do is ``web_auth``'s,
which files a request may reach ``web_folders``', the triage form's guards ``web_form_tokens``'.

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

import logging
import urllib.parse
from typing import Annotated, Any, Optional

from fastapi import Depends, FastAPI, Form, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mxbench.airflow_glue import web_auth, web_folders, web_form_tokens
from mxbench.run_folder import RunFolder

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


@app.exception_handler(RequestValidationError)
async def invalid_request_page(request: Request, exc: RequestValidationError) -> HTMLResponse:
    """A refused parameter as a page that names the parameter and the rule, never the value sent
    (FastAPI's own answer echoes it)."""
    problems = "; ".join(f"{'.'.join(str(part) for part in error['loc'][1:])}: {error['msg']}"
                         for error in exc.errors())
    return page("mxbench: 422", f"Refused: {problems}", 422)


def dag_run_state(dag_id: str, run_id: str) -> Optional[str]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def readable_run(user, dag_id: str, run_id: str, key: str) -> RunFolder:
    """The run's folder for a reader of its files, checked as the report is: the auth manager
    lets ``user`` read the DAG's runs (else 403), it is an mxbench DAG and Airflow has that DAG
    run (else 404), and the run is one of its request's, in its folder (else 404)."""
    from mxbench import artifacts
    from mxbench_train.errors import MxbenchError

    if not web_auth.may_read(user, dag_id):
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
    dag_folder = web_folders.dag_run_folder(dag_id, run_id)
    run_folder = None if dag_folder is None else web_folders.run_folder_of(dag_folder, key)
    if run_folder is None:
        raise HTTPException(404, f"DAG run {run_id} of {dag_id} has no run {key!r}")
    return run_folder


@app.get("/run-files", response_class=HTMLResponse)
def run_files(dag_id: str, run_id: str, run: str, user: Annotated[Any, Depends(web_auth.current_user)]) -> HTMLResponse:
    """A run's record and logs, each a link to ``run-file``: a failed or contended run's evidence."""
    import pandas as pd

    from mxbench.report import render_page
    from mxbench.report.links import Links, run_files_href

    run_folder = readable_run(user, dag_id, run_id, run)
    files = pd.DataFrame([{"file": Links(name, [(name, run_files_href(dag_id, run_id, run, name, base=""))]),
                           "bytes": f"{(run_folder.path / name).stat().st_size:,}"}
                          for name in web_folders.run_evidence_files(run_folder)])
    title = f"mxbench: run {run} of DAG run {run_id} ({dag_id})"
    return HTMLResponse(render_page(title, [], [("Record and logs", files)], []))


@app.get("/run-file")
def run_file(dag_id: str, run_id: str, run: str, file: str, user: Annotated[Any, Depends(web_auth.current_user)]):
    """One of a run's files (``web_folders.run_evidence_files``), as plain text."""
    path = web_folders.evidence_file(readable_run(user, dag_id, run_id, run), file)
    if path is None:
        raise HTTPException(404, f"Run {run} of DAG run {run_id} has no record or log {file!r}")
    return FileResponse(path, media_type="text/plain; charset=utf-8")


@app.get("/report/{dag_id}/{run_id:path}", response_class=HTMLResponse)
def report(dag_id: str, run_id: str, user: Annotated[Any, Depends(web_auth.current_user)]) -> HTMLResponse:
    if not web_auth.may_read(user, dag_id):
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
    read as a folder: ``web_folders.report_file``); None when there is none yet. A store that cannot be read
    answers 503, its cause in the api-server's log."""
    from mxbench import artifacts
    from mxbench_train.errors import MxbenchError

    try:
        store = artifacts.Store()
        if store.is_home:
            path = web_folders.report_file(dag_id, run_id)
            return None if path is None else path.read_text(encoding="utf-8")
        body = artifacts.read_report(dag_id, run_id, store)
    except (MxbenchError, OSError) as exc:
        log.error("mxbench report: the artifact store cannot be read: %s", exc)
        raise HTTPException(503, "The artifact store cannot be read; the api-server's log says why") from None
    return None if body is None else body.decode("utf-8", "replace")


# Airflow's backfill ids are integer keys; a bigger number is no backfill, refused before any query
BACKFILL_ID = Query(ge=1, le=2**31 - 1, description="only the DAG runs of this Airflow backfill")


@app.get("/history", response_class=HTMLResponse)
def history(user: Annotated[Any, Depends(web_auth.current_user)],
            backfill: Annotated[Optional[int], BACKFILL_ID] = None) -> HTMLResponse:
    """The history page; editors of a DAG get a triage form on each of its alerts. With
    ``?backfill=<id>``: only the DAG runs of that Airflow backfill (judged against the whole
    history, as its regression checks were), its builds view first."""
    import pandas as pd

    from mxbench import store
    from mxbench.regression.regression_rule import judge_history
    from mxbench.report import history_page

    dag_ids = [dag_id for dag_id in DAG_IDS if web_auth.may_read(user, dag_id)]
    if not dag_ids:
        raise HTTPException(403, f"You may not read the runs of {' or '.join(DAG_IDS)}")
    scope = backfill_runs(backfill) if backfill is not None else None
    if backfill is not None and scope is None:
        raise HTTPException(404, f"No backfill {backfill}")
    if scope is not None and scope.dag_id not in dag_ids:
        raise HTTPException(403, f"You may not read the runs of backfill {backfill}")
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
    editable = [dag_id for dag_id in dag_ids if web_auth.may_edit(user, dag_id)]
    secret = web_form_tokens.form_secret() if editable else None
    token = web_form_tokens.form_token(user.get_id(), secret) if secret else None
    shown = rows[rows["dag_id"].isin(dag_ids)]
    if scope is not None:
        shown = shown[(shown["dag_id"] == scope.dag_id) & shown["run_id"].isin(scope.run_ids)]
    return HTMLResponse(history_page(shown, source, alerts=alerts, editable=editable, form_token=token, sizes=sizes,
                                     names=names, scope=scope.text() if scope else None,
                                     backfills=backfills_table(dag_ids)))


@app.get("/history/backfill-of/{dag_id}/{run_id:path}")
def history_of_backfill(user: Annotated[Any, Depends(web_auth.current_user)], dag_id: str,
                        run_id: str) -> RedirectResponse:
    """The history page filtered to the backfill a DAG run belongs to (a backfill report's link:
    a task cannot read its DAG run's backfill id, the api-server can)."""
    if dag_id not in DAG_IDS or not web_auth.may_read(user, dag_id):
        raise HTTPException(403, f"You may not read the runs of {dag_id}")
    found = backfill_id_of(dag_id, run_id)
    if found is None:
        raise HTTPException(404, "That DAG run is not part of a backfill")
    # relative, so that it works behind any path the UI is served under: up from <dag>/<run> to the app
    up = "../" * (3 + run_id.count("/"))
    return RedirectResponse(f"{up}history?{urllib.parse.urlencode({'backfill': found})}", status_code=303)


class BackfillRuns:
    """An Airflow backfill as the history page shows it: its DAG, its range, its DAG runs."""

    def __init__(self, backfill_id: int, dag_id: str, from_date, to_date, run_ids):
        self.backfill_id, self.dag_id, self.from_date, self.to_date = backfill_id, dag_id, from_date, to_date
        self.run_ids = list(run_ids)

    def text(self) -> str:
        return (f"Backfill {self.backfill_id} of {self.dag_id}, {self.from_date:%Y-%m-%d} to {self.to_date:%Y-%m-%d}: "
                f"only its {len(self.run_ids)} DAG run(s) are shown (each judged against the whole history before it).")


def backfill_runs(backfill_id: int) -> Optional[BackfillRuns]:
    """Airflow's backfill ``backfill_id`` and the DAG runs it made (they carry its id); None: no such backfill."""
    from airflow.models.backfill import Backfill
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.get(Backfill, backfill_id)
        if found is None:
            return None
        run_ids = session.scalars(select(DagRun.run_id).where(DagRun.backfill_id == backfill_id)).all()
        return BackfillRuns(backfill_id, found.dag_id, found.from_date, found.to_date, run_ids)


RECENT_BACKFILLS = 20  # listed on the history page, newest first


def backfills_table(dag_ids) -> Any:
    """The newest backfills of ``dag_ids`` as a table, each linking to the history page of its DAG runs only."""
    import pandas as pd
    from airflow.models.backfill import Backfill
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    from mxbench.report.links import Links

    with create_session() as session:
        found = session.execute(
            select(Backfill.id, Backfill.dag_id, Backfill.from_date, Backfill.to_date, func.count(DagRun.run_id))
            .outerjoin(DagRun, DagRun.backfill_id == Backfill.id).where(Backfill.dag_id.in_(list(dag_ids)))
            .group_by(Backfill.id).order_by(Backfill.id.desc()).limit(RECENT_BACKFILLS)).all()
    return pd.DataFrame([{
        "backfill": Links(f"backfill {number}", [(f"backfill {number}",
                                                  f"history?{urllib.parse.urlencode({'backfill': number})}")]),
        "DAG": dag_id, "from": f"{start:%Y-%m-%d}", "to": f"{end:%Y-%m-%d}", "DAG runs": runs}
        for number, dag_id, start, end, runs in found], columns=["backfill", "DAG", "from", "to", "DAG runs"])


def backfill_id_of(dag_id: str, run_id: str) -> Optional[int]:
    """The id of the backfill that made DAG run ``run_id`` of ``dag_id``; None: none did."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.backfill_id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


@app.post("/history/alerts")
def set_alert(request: Request, who: Annotated[tuple, Depends(web_auth.writer)], dag_id: Annotated[str, Form()],
              run_id: Annotated[str, Form()], variant: Annotated[str, Form()], launcher: Annotated[str, Form()],
              state: Annotated[str, Form()], environment: Annotated[str, Form()] = "",
              reason: Annotated[str, Form()] = "", token: Annotated[str, Form()] = ""):
    """Set an alert's triage state (the history page's form, or an API client with a bearer token);
    303 back to the history page."""
    from mxbench import store
    from mxbench.regression import triage

    user, by_header = who
    if not by_header:  # the login cookie: a browser, which any site's form can make post
        refused = web_form_tokens.cross_site(request.headers, web_form_tokens.own_hosts(request))
        if refused:
            raise HTTPException(403, f"Refused a triage change from another site: {refused}")
        secret = web_form_tokens.form_secret()
        if not secret or not web_form_tokens.valid_form_token(token, user.get_id(), secret):
            raise HTTPException(403, "The triage form's token is missing, expired or not yours: reload the history "
                                     "page and set the state again")
    if dag_id not in DAG_IDS:
        raise HTTPException(404, f"{dag_id} is not an mxbench DAG: it has no alerts")
    if not web_auth.may_edit(user, dag_id):
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

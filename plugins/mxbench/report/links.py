"""Links out of a report to the evidence behind it: another DAG run's report, the Airflow task log
of a run's try, a run's record and role logs (``airflow_glue.web`` serves them).

The report page is served at ``<UI base>/mxbench/report/<dag id>/<run id>`` (the DAG run's
"Benchmark report" tab: the UI puts each id in one path segment, URL-quoted), so every link here
is relative to that: ``../../`` is ``<UI base>/mxbench/``, ``../../../`` the UI's own base, and the
links work behind any path the UI is served under. Each id is quoted whole (``quote(safe="")``):
a run id chosen by a trigger user can add no path segment, query or scheme. A link opens in the
report's frame (the UI's frame allows its page no other). In report.md a link is its plain text.
"""
import html
from typing import Optional, Sequence, Tuple
from urllib.parse import quote, urlencode

from mxbench.run_folder import RunFolder

MXBENCH = "../../"  # from the report page to the plugin's app
UI = "../../../"  # from the report page to the Airflow UI's base
RUN_TASK = "run_variant"  # the mapped run task, in a task group named after its machine set


def segment(value) -> str:
    return quote(str(value), safe="")


def report_href(dag_id: str, run_id: str) -> str:
    """A DAG run's report (what its "Benchmark report" tab shows)."""
    return f"{MXBENCH}report/{segment(dag_id)}/{segment(run_id)}"


def backfill_history_href(dag_id: str, run_id: str) -> str:
    """The history page filtered to the backfill that made this DAG run (``web``'s ``history/backfill-of``)."""
    return f"{MXBENCH}history/backfill-of/{segment(dag_id)}/{segment(run_id)}"


def task_log_href(dag_id: str, run_id: str, task_id: str, map_index: Optional[int] = None,
                  try_number: Optional[int] = None) -> str:
    """The Airflow UI's log of one try of a task instance (Airflow 3's UI:
    ``dags/<dag>/runs/<run>/tasks/<task>[/mapped/<index>]``, whose first tab is the log,
    ``?try_number=n`` choosing the try; without one, the latest)."""
    href = f"{UI}dags/{segment(dag_id)}/runs/{segment(run_id)}/tasks/{segment(task_id)}"
    if map_index is not None:
        href += f"/mapped/{int(map_index)}"
    return href + (f"?{urlencode({'try_number': int(try_number)})}" if try_number else "")


def run_files_href(dag_id: str, run_id: str, key: str, file: Optional[str] = None, base: str = MXBENCH) -> str:
    """A run's files (``web``'s ``run-files``: its record and logs), or one of them (``run-file``);
    ``base``: the way from the linking page to the plugin's app ("" from the app's own pages)."""
    query = {"dag_id": dag_id, "run_id": run_id, "run": key, **({"file": file} if file else {})}
    return f"{base}{'run-file' if file else 'run-files'}?{urlencode(query, quote_via=quote)}"


def run_task(request: dict, key: str) -> Optional[Tuple[str, int]]:
    """(task id, map index) of the run task that ran run ``key``: the machine set's
    ``<set>.run_variant``, mapped over the request's runs of that set's launchers in expansion
    order (``airflow_glue.dag_tasks.launch_runs``); None where the request does not say."""
    runs = request.get("runs") or []
    for machines, launchers in (request.get("machine_sets") or {}).items():
        mine = [run.get("key") for run in runs if run.get("launcher") in launchers]
        if key in mine:
            return f"{machines}.{RUN_TASK}", mine.index(key)
    return None


class Links:
    """A table cell of links: ``str()`` is its plain text (report.md), ``html()`` the anchors
    (``pages.render_page``)."""

    def __init__(self, plain: str, anchors: Sequence[Tuple[str, str]] = ()):
        self.plain, self.anchors = plain, list(anchors)

    def __str__(self) -> str:
        return self.plain

    def __repr__(self) -> str:
        return f"Links({self.plain!r}, {self.anchors!r})"

    def html(self) -> str:
        if not self.anchors:
            return html.escape(self.plain)
        return " · ".join(f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"
                          for text, href in self.anchors)


def run_evidence(request: dict, key: str, try_number=None) -> Links:
    """A failed or contended run's evidence: the Airflow task log of its try, its record
    (meta.json) and its files (role and worker logs). Plain text: where they are."""
    dag_id, run_id = request.get("dag_id"), request.get("run_id")
    task = run_task(request, key)
    tried = int(try_number) if _number(try_number) else None
    where = f"{task[0]}[{task[1]}]" if task else "its run task"
    plain = (f"task log: {where}" + (f" try {tried}" if tried else "")
             + f"; record: {key}/{RunFolder.META}; logs: {key}/")
    if not dag_id or not run_id:  # a folder from before request.json named its DAG run
        return Links(plain)
    anchors = []
    if task:
        anchors.append((f"task log (try {tried})" if tried else "task log",
                        task_log_href(dag_id, run_id, task[0], task[1], tried)))
    anchors += [("record", run_files_href(dag_id, run_id, key, RunFolder.META)),
                ("logs", run_files_href(dag_id, run_id, key))]
    return Links(plain, anchors)


def _number(value) -> bool:
    try:
        return float(value) >= 1
    except (TypeError, ValueError):
        return False

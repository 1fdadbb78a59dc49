"""Why a DAG run fails: the failures of the stages before the runs (``stages.json``, so that the
runs they stopped name the root cause), the runs without a result, and the message ``check_runs``
fails the DAG run with. No Airflow here."""
from typing import List, Optional

from mxbench.run_folder import DagRunFolder, load_table, read_json, write_json

STAGE_NAMES = {"expand": "expanding the variants", "prepare_data": "data preparation"}


def stage_failed(folder: DagRunFolder, stage: str, error: Exception) -> str:
    """Remember why a stage before the runs failed, so the runs it stopped can name the root
    cause; returns that cause, "<stage> failed: <error>"."""
    cause = f"{STAGE_NAMES[stage]} failed: {error}"
    stages = read_json(folder.stages, {})
    write_json(folder.stages, {**stages, stage: cause})
    return cause


def clear_stage_failure(folder: DagRunFolder, stage: str) -> None:
    stages = read_json(folder.stages, {})
    if stage in stages:
        write_json(folder.stages, {k: v for k, v in stages.items() if k != stage})


def root_cause(folder: DagRunFolder):
    """'data preparation failed: ...' when an upstream stage failed; None otherwise."""
    stages = read_json(folder.stages, {})
    return next((cause for stage in STAGE_NAMES if (cause := stages.get(stage))), None)



def failed_runs(folder: DagRunFolder) -> List[dict]:
    """The runs without a result (key, status, cause), from ``tables/runs.csv``; an optional
    round skipped because the verdict was already settled is not one."""
    runs = load_table(folder.table("runs"))
    if runs.empty:
        return []
    return runs.loc[~runs["status"].isin(["ok", "skipped"]), ["key", "status", "cause"]].to_dict("records")


def failure_message(folder: DagRunFolder) -> Optional[str]:
    """Why the DAG run must fail, in a few lines (root cause first); None when every run measured."""
    upstream = root_cause(folder)
    failed = failed_runs(folder)
    if upstream:
        not_run = sum(f["status"] == "not run" for f in failed)
        return upstream + (f" ({not_run} run(s) not run)" if not_run else "")
    if not folder.report_markdown.is_file():
        return f"no report was built in {folder.path}: see parse_logs, join_results, report"
    problems = []
    if failed:
        lines = "\n".join(f"{f['key']}: {f['status']}: {f['cause']}" for f in failed)
        problems.append(f"{len(failed)} run(s) without a result:\n{lines}")
    stored = read_json(folder.stored, {})
    if stored.get("error"):
        problems.append(f"storing the results in the results database failed: {stored['error']}")
    findings = load_table(folder.table("regression"))
    if "triage" in findings.columns:
        from mxbench.regression.triage import ACCEPTING

        # regressions at the level of an acknowledged or expected alert are reported, not failed for
        findings = findings[~findings["triage"].isin(ACCEPTING)]
    if not findings.empty:
        from mxbench.regression.regression_rule import alert

        build = (read_json(folder.request, {}).get("build") or {}).get("package")
        regressed = alert(findings.to_dict("records"), build)
        if regressed:
            problems.append(regressed)
    return "\n".join(problems) or None


"""What a reader must know besides the numbers: where the data came from, stand-ins, CPU only,
reused and retried runs (``conditions``: one short line each, the whole sentence a click away), the
data in one line, the machine the runs ran on, and the report's title."""
from datetime import datetime, timezone
from typing import Dict, List, NamedTuple, Optional

import pandas as pd

from mxbench.results import contention
from mxbench.run_folder import DagRunFolder, load_table, read_json

TARGET_NAMES = {"local": "Local", "ssh": "SSH", "kubernetes": "Kubernetes"}
SHORT = 110  # characters of a condition's line; the whole sentence is its detail


class Condition(NamedTuple):
    """One thing a reader must know before trusting the numbers: a line for the conditions box and
    the whole sentence behind it."""
    short: str
    detail: str


def conditions(folder: DagRunFolder) -> List[Condition]:
    """What a reader must know before trusting the numbers: synthetic data, stand-ins, CPU only.
    A condition true of several targets is one line naming them all."""
    found = []
    data = read_json(folder.data, {})
    if data.get("synthetic"):
        found.append(Condition("Synthetic data: generated CIFAR-format images, not CIFAR-10",
                               "SYNTHETIC DATA: generated CIFAR-format images, not CIFAR-10. Accuracy numbers say "
                               "nothing about CIFAR-10; speed numbers are representative of the pipeline only."))
    elif data and not data.get("verified"):
        found.append(Condition("Unverified data: not the official CIFAR-10 archive",
                               f"Unverified data: {data.get('source')} is not the official CIFAR-10 archive "
                               "(MD5 differs)."))
    request = read_json(folder.request, {})
    runs = load_table(folder.table("runs"))
    if "reused" in runs and runs["reused"].fillna(False).astype(bool).any():
        reused = runs.loc[runs["reused"].fillna(False).astype(bool), "key"]
        found.append(Condition(f"Reused: {len(reused)} run(s) measured by an earlier attempt of this DAG run",
                               f"REUSED: {', '.join(reused)} were measured by an earlier attempt of this DAG run and "
                               "reused as they were."))
    found += [Condition(shorten("R" + note.split(": ", 1)[1].split(":")[0][1:]), note) for note in retried_notes(runs)]
    found += link_fault_conditions(runs)
    contended = contention.contended_line(runs)
    if contended:
        found.append(Condition(contended.split(" had other work")[0] + " had other work on their hosts", contended))
    judged_with = contention.thresholds_line(runs)
    if judged_with and (contended or "(defaults" not in judged_with):  # only when it says something new
        found.append(Condition(shorten(judged_with), judged_with))
    readings = contention.readings_line(runs)
    if readings:
        found.append(Condition(shorten(readings), readings))
    waited = quiet_condition(runs, request, folder)
    if waited:
        found.append(waited)
    found += [Condition(shorten(f"Note: {note}"), f"NOTE: {note}")
              for note in request.get("params", {}).get("notes") or []]
    for reason in (request.get("unavailable") or {}).values():
        found.append(Condition(shorten(f"Unavailable: {reason}"),
                               f"UNAVAILABLE: {reason}; its runs failed with that cause."))
    for machines, members in (request.get("machine_sets") or {}).items():
        if len(members) > 1:
            others = "neither slowed the other" if len(members) == 2 else "none slowed another"
            found.append(Condition(
                f"Shared machines: {join_names(members)} took turns on the same machines",
                f"SHARED MACHINES: {join_names(members)} ran on the same machines (pool mxbench_{machines}, one run "
                f"at a time), so {others} down; the launcher table says in which order their repeats ran."))
    targets = request.get("targets", {})
    for name, target in targets.items():
        found += [Condition(shorten(f"{TARGET_NAMES.get(name, name)} target: {note.split(': ')[0].split(' (')[0]}"),
                            f"{name.upper()} TARGET: {note}") for note in target.get("notes") or []]
    # one line for all the targets a condition is true of, not one each
    one_machine = [name for name, target in targets.items() if target.get("one_machine") and any(
        r["variant"].get("hosts", 1) > 1 and r["launcher"] == name for r in request.get("runs", []))]
    if one_machine:
        found.append(Condition(
            f"One machine: {join_names(one_machine)} ran multi-host variants on loopback addresses",
            f"ONE MACHINE: the {join_names(one_machine)} {plural(one_machine, 'launcher')} ran multi-host "
            "variants on this one machine, each host a loopback address (127.0.0.1, 127.0.0.2, ...): the "
            "hosts shared its cores and no network was crossed."))
    pod_network = pod_network_condition(request, folder)
    if pod_network:
        found.append(pod_network)
    no_gpu = [name for name, target in targets.items() if not target.get("gpus_per_host")]
    if no_gpu:
        found.append(Condition(
            f"No GPU on {join_names(no_gpu)}: training ran on the CPU",
            f"No GPU on the {join_names(no_gpu)} {plural(no_gpu, 'target')}: training ran on the CPU; "
            "GPU columns are n/a, and workers on one host share its cores, so scaling shows the host, not MXNet."))
    return found


def link_fault_conditions(runs: pd.DataFrame) -> List[Condition]:
    """One line per run a link fault ended (``meta.json``'s ``link_fault``: the host or node and its
    link): that round is lost, not re-measured, and the verdicts rest on the rounds that measured."""
    if "link_fault" not in runs:
        return []
    lost = runs[runs["link_fault"].notna() & (runs["status"] != "ok")]
    return [Condition(shorten(f"Link fault: {row['key']} lost"),
                      f"LINK FAULT: round {row['repeat']} of {row['variant']} under {row['launcher']} "
                      f"({row['key']}) was lost to a link fault: {row['link_fault']}. The round was not "
                      "re-measured: the verdicts rest on the rounds that measured.")
            for row in lost.to_dict("records")]


def pod_network_condition(request: dict, folder: DagRunFolder) -> Optional[Condition]:
    """Which network the Kubernetes runs' pods ran on, as they read it themselves (their network
    namespace and interfaces: the launcher's ``pod_network`` in each run's kubernetes.json); one
    part per reading, naming its variants. None without a reading."""
    variants: Dict[str, List[str]] = {}
    for run in request.get("runs", []):
        if run.get("launcher") == "kubernetes":
            line = (read_json(folder.run(run["key"]).step_times("kubernetes"), {}) or {}).get("pod_network")
            if isinstance(line, str):
                variants.setdefault(line, [])
                if run["variant"]["id"] not in variants[line]:
                    variants[line].append(run["variant"]["id"])
    if not variants:
        return None
    kinds = "; ".join(f"{line.split(':')[0]} ({', '.join(ids)})" for line, ids in variants.items())
    return Condition(shorten(f"Pod network, as the pods read it: {kinds}"),
                     "POD NETWORK, as the Kubernetes runs' pods read it (their network namespace, and each "
                     "interface's driver and MTU, from inside the pod): "
                     + "; ".join(f"{', '.join(ids)}: {line}" for line, ids in variants.items()) + ".")


def quiet_condition(runs: pd.DataFrame, request: dict, folder: DagRunFolder) -> Optional[Condition]:
    """The quiet check before the runs (``hosts.quiet_gate``): how many started on quiet hosts, how long
    they waited, which went on busy and why; None when no run was checked."""
    if "quiet" not in runs or runs["quiet"].isna().all():
        return None
    checked = runs[runs["quiet"].notna()]
    quiet = checked["quiet"].astype(str).str.lower() == "true"
    waited = pd.to_numeric(checked["quiet_wait_s"], errors="coerce").fillna(0)
    bound = (request.get("params") or {}).get("quiet_wait_s")
    short = (f"Quiet check: {int(quiet.sum())} of {len(checked)} checked runs started on quiet hosts, "
             f"after {waited.sum():.0f} s of waiting in all")
    busy = checked.loc[~quiet, "key"].tolist()
    whys = [f"{key}: {(read_json(folder.run(key).meta, {}) or {}).get('quiet', {}).get('why', '?')}" for key in busy]
    unchecked = len(runs) - len(checked) - int((runs.get("status") == "skipped").sum())
    detail = (f"QUIET CHECK: before each run, its hosts were looked at until they were quiet (the CPU other "
              f"processes used and the steal under the contention thresholds) or "
              f"{bound if bound is not None else '?'} s (quiet_wait_s) had passed; "
              f"{int(quiet.sum())} of {len(checked)} checked runs started on quiet hosts, waiting "
              f"{waited.sum():.0f} s in all (at most {waited.max():.0f} s).")
    if busy:
        short += f"; {len(busy)} went on busy"
        detail += f" {len(busy)} went on busy hosts: " + "; ".join(whys) + "."
    if unchecked > 0:
        detail += (f" {unchecked} run(s) were not checked: a pod sees only its own /proc, the check was off, its "
                   "hosts could not be looked at, or the run failed before it.")
    return Condition(shorten(short), detail)


def provenance(folder: DagRunFolder) -> List[str]:
    """The conditions' whole sentences."""
    return [condition.detail for condition in conditions(folder)]


def shorten(line: str, width: int = SHORT) -> str:
    return line if len(line) <= width else line[:width - 1].rstrip() + "…"


def pair_tags(request: dict, data: dict, launchers) -> List[str]:
    """Short tags for a verdict between ``launchers``: what changes how its number may be read."""
    targets = [(request.get("targets") or {}).get(name) or {} for name in launchers]
    tags = ["synthetic data"] if data.get("synthetic") else []
    if any(t.get("stand_in") for t in targets):
        tags.append("stand-in cluster")
    if any(t.get("one_machine") or t.get("on_this_machine") for t in targets):
        tags.append("shared cores")
    if any(t and not t.get("gpus_per_host") for t in targets):
        tags.append("CPU only")
    return tags


def report_title(folder: DagRunFolder, runs: pd.DataFrame) -> str:
    """What people call the report: the DAG, the night it stands for (a scheduled or backfill DAG
    run's logical date; else when its runs started, UTC), the MXNet build it measured (where its
    DAG chose one: the regression and bisect DAGs), the preset and variants, and, for a night, when
    it ran. The run id and folder are in the report's details."""
    request = read_json(folder.request, {}) or {}
    dag_id = request.get("dag_id") or "mxbench"
    when = started(runs) or datetime.fromtimestamp(folder.path.stat().st_mtime, timezone.utc)
    variants = list(dict.fromkeys(run["variant"]["id"] for run in request.get("runs", []) if "variant" in run))
    shown = ", ".join(variants[:3]) + (f" and {len(variants) - 3} more" if len(variants) > 3 else "")
    preset = (request.get("params") or {}).get("preset")
    what = f"{preset}: {shown}" if preset and shown else (preset or shown)
    ran = when.strftime("%Y-%m-%d %H:%M UTC")
    night = measured_night(folder)
    parts = (dag_id, night or ran, measured_build(request, runs), what, f"ran {ran}" if night else "")
    return " · ".join(part for part in parts if part)


def measured_night(folder: DagRunFolder) -> str:
    """The night a DAG run stands for, from what the store task recorded (``stored.json``): "night
    of 2026-11-03" (a data interval of a day or none), "backfill night of ...", the interval where it
    is longer; "" for a DAG run with none (a manual one)."""
    stored = read_json(folder.stored, {}) or {}
    interval, logical = stored.get("data_interval"), stored.get("logical_date")
    if stored.get("trigger") not in ("scheduled", "backfill") or not (interval or logical):
        return ""
    kind = "backfill night" if stored["trigger"] == "backfill" else "night"
    if interval:
        start, end = (pd.Timestamp(t) for t in interval)
        # a cron schedule's DAG runs (Airflow 3's default timetable) have an empty interval at the logical date
        if end - start > pd.Timedelta(days=1):
            return f"{kind}s {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
        return f"{kind} of {start:%Y-%m-%d}"
    return f"{kind} of {pd.Timestamp(logical):%Y-%m-%d}"


def measured_build(request: dict, runs: pd.DataFrame) -> str:
    """The MXNet build a DAG run measured, where its DAG chose one (``request.json``'s ``build``):
    "MXNet 1.8.0 (mxnet==1.8.0.post0)", the version its trainers reported (each, where they differ),
    the commit and, where pods ran, their image; "" where the DAG chose none."""
    from mxbench_train.redaction import redact

    build = request.get("build") or {}
    if not build.get("package"):
        return ""
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs
    reported = list(dict.fromkeys(str(v) for v in ok.get("mxnet_reported", pd.Series(dtype=object)).dropna()))
    said = f"MXNet {', '.join(reported) or build.get('version') or '?'} ({redact(build['package'])}"
    if build.get("commit"):
        said += f", commit {str(build['commit'])[:10]}"
    images = (list(dict.fromkeys(str(v) for v in ok.loc[ok["launcher"] == "kubernetes", "runtime"].dropna()))
              if {"launcher", "runtime"} <= set(ok.columns) else [])
    return said + (f", image {', '.join(images)}" if images else "") + ")"


def started(runs: pd.DataFrame) -> Optional[datetime]:
    """When the first run started, from runs.csv's ``started_at`` (seconds since the epoch)."""
    if runs.empty or "started_at" not in runs:
        return None
    first = pd.to_numeric(runs["started_at"], errors="coerce").min()
    return None if pd.isna(first) else datetime.fromtimestamp(float(first), timezone.utc)


def join_names(names: List[str]) -> str:
    """'local', 'local and ssh', 'local, ssh and kubernetes'."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def plural(names: List[str], noun: str) -> str:
    return noun if len(names) == 1 else noun + "s"


def environment(folder: DagRunFolder, runs: pd.DataFrame) -> Dict[str, str]:
    for key in runs.loc[runs["status"] == "ok", "key"] if not runs.empty else []:
        env = (read_json(folder.run(key).metrics, {}) or {}).get("environment")
        if env:
            gpu = env.get("gpu", {})
            gpus = ", ".join(g["name"] for g in gpu.get("gpus", [])) if gpu.get("available") else \
                f"none ({gpu.get('reason')})"
            return {"MXNet": env.get("mxnet_version", "?"), "Python": env.get("python", "?"),
                    "CPU": f"{env.get('cpu_model')} ({env.get('cpu_count')} cores)", "GPUs": gpus,
                    "driver / CUDA": f"{gpu.get('driver') or 'n/a'} / {gpu.get('cuda') or 'n/a'}",
                    "host": env.get("host", "?")}
    return {}


def retried_notes(runs: pd.DataFrame) -> List[str]:
    """One line per run that took more than one try (its task failed or its worker was lost, and
    Airflow ran it again): which try measured it, and on which worker."""
    if runs.empty or "try_number" not in runs:
        return []
    tries = pd.to_numeric(runs["try_number"], errors="coerce").fillna(1)
    earlier = pd.to_numeric(runs.get("earlier_attempts", 0), errors="coerce").fillna(0)
    notes = []
    for row, try_number, attempts in zip(runs.to_dict("records"), tries, earlier):
        if try_number > 1 or attempts > 0:
            worker = row.get("worker") if isinstance(row.get("worker"), str) else "?"
            kept = f"; {int(attempts)} earlier attempt(s) kept under attempts/" if attempts else \
                "; the earlier try published nothing (see its task log)"
            notes.append(f"RETRIED: run {row['key']} was retried: try {int(try_number)} on worker {worker} "
                         f"{'measured it' if row.get('status') == 'ok' else 'failed too'}{kept}.")
    return notes


def data_line(data: dict) -> str:
    """What the runs trained on, in one line for people."""
    kind = "synthetic CIFAR-format data" if data.get("synthetic") else (
        "CIFAR-10, verified (official MD5)" if data.get("verified") else "CIFAR-10 format, unverified (MD5 differs)")
    records = ", ".join(f"{count:,} {split}" for split, count in data.get("records", {}).items())
    return f"Data: {data.get('source', '?')} ({kind}; records: {records or 'n/a'})"

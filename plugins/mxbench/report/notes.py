"""What a reader must know besides the numbers: where the data came from, stand-ins, CPU only,
reused and retried runs (``provenance``), the data in one line and the machine the runs ran on."""
from pathlib import Path
from typing import Dict, List

import pandas as pd

from mxbench.run_folder import DagRunFolder, load_table, read_json


def provenance(dag_dir: Path) -> List[str]:
    """What a reader must know before trusting the numbers: synthetic data, stand-ins, CPU only.
    A banner true of several targets is one line naming them all."""
    notes = []
    folder = DagRunFolder(dag_dir)
    data = read_json(folder.data, {})
    if data.get("synthetic"):
        notes.append("SYNTHETIC DATA: generated CIFAR-format images, not CIFAR-10. Accuracy numbers say "
                     "nothing about CIFAR-10; speed numbers are representative of the pipeline only.")
    elif data and not data.get("verified"):
        notes.append(f"Unverified data: {data.get('source')} is not the official CIFAR-10 archive (MD5 differs).")
    request = read_json(folder.request, {})
    runs = load_table(folder.table("runs"))
    if "reused" in runs and runs["reused"].fillna(False).astype(bool).any():
        keys = ", ".join(runs.loc[runs["reused"].fillna(False).astype(bool), "key"])
        notes.append(f"REUSED: {keys} were measured by an earlier attempt of this DAG run and reused as they were.")
    notes += retried_notes(runs)
    notes += [f"NOTE: {note}" for note in request.get("params", {}).get("notes") or []]
    for reason in (request.get("unavailable") or {}).values():
        notes.append(f"UNAVAILABLE: {reason}; its runs failed with that cause.")
    for machines, members in (request.get("machine_sets") or {}).items():
        if len(members) > 1:
            others = "neither slowed the other" if len(members) == 2 else "none slowed another"
            notes.append(f"SHARED MACHINES: {join_names(members)} ran on the same machines (pool mxbench_{machines}, "
                         f"one run at a time), so {others} down; the launcher table says in which order their "
                         "repeats ran.")
    targets = request.get("targets", {})
    for name, target in targets.items():
        notes += [f"{name.upper()} TARGET: {note}" for note in target.get("notes") or []]
    # one line for all the targets a banner is true of, not one each
    one_machine = [name for name, target in targets.items() if target.get("one_machine") and any(
        r["variant"].get("hosts", 1) > 1 and r["launcher"] == name for r in request.get("runs", []))]
    if one_machine:
        notes.append(f"ONE MACHINE: the {join_names(one_machine)} {plural(one_machine, 'launcher')} ran multi-host "
                     "variants on this one machine, each host a loopback address (127.0.0.1, 127.0.0.2, ...): the "
                     "hosts shared its cores and no network was crossed.")
    no_gpu = [name for name, target in targets.items() if not target.get("gpus_per_host")]
    if no_gpu:
        notes.append(f"No GPU on the {join_names(no_gpu)} {plural(no_gpu, 'target')}: training ran on the CPU; "
                     "GPU columns are n/a, and workers on one host share its cores, so scaling shows the host, "
                     "not MXNet.")
    return notes


def join_names(names: List[str]) -> str:
    """'local', 'local and ssh', 'local, ssh and kubernetes'."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def plural(names: List[str], noun: str) -> str:
    return noun if len(names) == 1 else noun + "s"


def environment(dag_dir: Path, runs: pd.DataFrame) -> Dict[str, str]:
    for key in runs.loc[runs["status"] == "ok", "key"] if not runs.empty else []:
        env = (read_json(DagRunFolder(dag_dir).run(key).metrics, {}) or {}).get("environment")
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

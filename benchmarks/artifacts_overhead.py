"""What the artifact store (``mxbench.artifacts``, issue 18) costs a DAG run (orchestration env):

    .venv/airflow/bin/python benchmarks/artifacts_overhead.py [--repeats 10] [--images 3000]
                                 [--dag-runs 4] [--matrix-repeats 2]
                                 [--skip-dag-runs] [--keep]

In a scratch folder (its own MXBENCH_HOME and SQLite Airflow home), first one real run: the
cpu-demo variant cpu4w-bs64 (4 dist_sync workers: the demo's run with the most files) for 1
epoch on the demo's synthetic data set (``--images`` training images, prepared as
``prepare_data`` does: ``synthetic-cifar10`` + ``prepare-cifar10`` in the training env),
trained by ``stages.run_stage.run_one`` with the local launcher. Then two stores side by
side, their measurements interleaved (S3 first on even repeats, file:// first on odd ones):
moto's S3 server on loopback (standins/s3_server.py) through an Airflow aws connection, and
a file:// store in the scratch folder that is not MXBENCH_HOME (so it is copied and hashed like
object storage, not used in place). Prints the medians over ``--repeats`` of:

1. per run task, as ``artifacts.run_folder`` does it around the run: the fetch at its start (the
   DAG run's own files and the run's unit) and the publish at its end (that run folder's files,
   hashed, uploaded, then the manifest, then the scratch folder removed). Each repeat is a new DAG
   run in the store, so nothing is skipped as already published. Target: publish <= 0.5 s.
   Beside it, one tick of the publishing the run task does every 15 s while it trains
   (``Workspace.publish`` after the logs grew; no target).
2. the prepared data set's fetch by a run task (``artifacts.local_data``): a miss (the worker's
   cache empty: every file downloaded and checked) and then a hit (the cache holds it: one
   manifest read). Target: hit <= 0.1 s.
3. unless --skip-dag-runs, the wall time (the DAG run's start_date to end_date, as Airflow records
   them) of one small matrix (cpu1-bs32, ``--matrix-repeats`` 2, 1 epoch, the same data size) on
   a real CeleryExecutor stack with S3 (standins/celery_stack.py: Redis, PostgreSQL, two
   workers with MXBENCH_HOMEs of their own) and on a real LocalExecutor stack with the default
   file:// store (standins/airflow_stack.py, as _stack.py's: SQLite, scheduler idle
   sleep 0.5 s), both triggered and read through the same REST calls. Both stacks are up
   throughout and their DAG runs alternate (Celery first in even rounds), so a drift in the
   machine's load hits both alike; each stack's first DAG run makes the data set (its caches are
   empty). Target: Celery+S3 / Local+file <= 1.15, medians over ``--dag-runs`` each.

What is real: the trainer, the store code the tasks run, moto's S3 wire protocol (HTTP, boto's
signing and retries), both Airflow stacks. What is simplified: every store and "worker" is this
machine, so S3's latency and bandwidth are loopback's (a real bucket adds a round trip of tens
of ms per request: a run task's publish makes about 3 + one per changed file, its fetch about
7). In part 3 the idle stack (its scheduler and dag-processor loops) takes some CPU from the one
measured, each in turn. And the two stacks differ in more than the store: the executor, the
metadata DB (PostgreSQL against SQLite) and the number of worker processes, so the ratio
compares the two deployments; the store's own share of a DAG run is parts 1 and 2 times its
tasks. Exits 1 when over a target or when a run or DAG run fails; the scratch folder is
removed on success unless --keep. About 7 minutes on 2 cores with the defaults (part 3 is most).
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from _stack import DAG_ID, begin, finish  # noqa: E402

RUN_VARIANT = "cpu4w-bs64"  # parts 1 and 2: the cpu-demo run with the most files (4 workers, 6 roles)
MATRIX_VARIANT = "cpu1-bs32"  # part 3: the quickest
PUBLISH_TARGET_S = 0.5
HIT_TARGET_S = 0.1
WALL_RATIO_TARGET = 1.15
BUCKET = "mxbench-bench"
CONN_ID = "mxbench_artifacts"
DAG_RUN_DEADLINE_S = 10 * 60


def median_ms(values) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms (max {max(values) * 1000:.1f})"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def real_run(scratch: Path, images: int):
    """One real run of RUN_VARIANT for 1 epoch: (DAG run folder, run key, data dict)."""
    from mxbench import config, launchers
    from mxbench.run_folder import DagRunFolder
    from mxbench.stages import pipeline, run_stage

    params = {"preset": "cpu-demo", "only_variants": [RUN_VARIANT], "repeats": 1, "epochs": 1,
              "synthetic_images": images, "launchers": ["local"]}
    dag_dir = scratch / "source-run"
    dag_dir.mkdir()
    targets, unavailable = pipeline.targets_for(["local"], launchers.get)
    if unavailable:
        raise RuntimeError(f"the local launcher is unavailable: {unavailable}")
    folder = DagRunFolder(dag_dir)
    (run,) = pipeline.expand(params, folder, targets, dag_id=DAG_ID)
    started = time.monotonic()
    data = pipeline.prepare_data(params, folder, config.data_dir())
    prepared = time.monotonic()
    result = run_stage.run_one(run, folder, data, deadline_s=600)
    if result["status"] != "ok":
        raise RuntimeError(f"run {run['key']} ended {result['status']}: see {dag_dir / run['key']}")
    files = list((dag_dir / run["key"]).rglob("*"))
    print(f"data set {data['name']} prepared in {prepared - started:.0f} s; run {run['key']} trained in "
          f"{time.monotonic() - prepared:.0f} s: {sum(f.is_file() for f in files)} files, "
          f"{sum(f.stat().st_size for f in files if f.is_file()) / 1e3:.0f} kB")
    return dag_dir, run["key"], data


def run_task_round(store, dag_dir: Path, key: str, run_id: str):
    """The store's part of one run task, as ``artifacts.run_folder`` does it: (fetch s, publish s).
    The DAG run's files are put in the store first, as expand_variants and prepare_data publish
    them; the run's folder is copied into the task's scratch folder untimed (training made it)."""
    from mxbench import artifacts, run_folder

    name = artifacts.dag_run_name(DAG_ID, run_id)
    store.put([(dag_dir / rel, f"runs/{name}/{rel}") for rel in ("request.json", "data.json")])
    task = {"worker": "bench", "try_number": 1}
    started = time.perf_counter()
    with artifacts.run_folder(DAG_ID, run_id, key, extra=task, store=store) as space:
        fetched = time.perf_counter()
        scratch = space.folder.path
        shutil.copytree(dag_dir / key, scratch / key)
        ending = time.perf_counter()
    published = time.perf_counter()
    # what was published is the run folder, whole and unchanged, and the scratch folder is gone
    manifest = store.manifest(f"runs/{name}", key)
    want = {rel: run_folder.sha256_of(dag_dir / rel) for rel in artifacts.files_under(dag_dir, key)}
    got = {rel: entry["sha256"] for rel, entry in (manifest or {}).get("files", {}).items()}
    if got != want or manifest.get("worker") != "bench":
        raise RuntimeError(f"{store}: the published unit {key} of {name} differs from the run folder: "
                           f"{sorted(set(want) ^ set(got)) or 'sha256 or extra'}")
    if scratch.exists():
        raise RuntimeError(f"{store}: the run task's scratch folder {scratch} outlived its publish")
    return fetched - started, published - ending


def progress_round(store, dag_dir: Path, key: str, run_id: str, scratch: Path) -> float:
    """One tick of a run task's progress publishing while it trains (``Workspace.publishing``,
    every 15 s): its logs grew since the tick before, which published the rest."""
    from mxbench import artifacts, run_folder

    name = artifacts.dag_run_name(DAG_ID, run_id)
    store.put([(dag_dir / rel, f"runs/{name}/{rel}") for rel in ("request.json", "data.json")])
    space = artifacts.Workspace(store, name, scratch / name)
    space.fetch_dag_files()
    shutil.copytree(dag_dir / key, space.path / key)
    extra = {key: {"worker": "bench", "try_number": 1}}
    space.publish(extra)
    logs = sorted((space.path / key).rglob("*.log"))
    for log in logs:  # what 15 s of training adds: a few Speedometer lines
        with open(log, "a") as f:
            f.write("INFO:root:Epoch[0] Batch [80-90]\tSpeed: 512.00 samples/sec\taccuracy=0.100000\n" * 5)
    started = time.perf_counter()
    units = space.publish(extra)
    seconds = time.perf_counter() - started
    manifest = store.manifest(f"runs/{name}", key)
    if units != [key] or any(manifest["files"][str(log.relative_to(space.path))]["sha256"] != run_folder.sha256_of(log)
                             for log in logs):
        raise RuntimeError(f"{store}: a progress publish of {key} did not send the grown logs")
    shutil.rmtree(scratch)
    return seconds


def data_round(store, name: str, root: Path):
    """A run task's fetch of the prepared data set into an empty cache, then again: (miss s, hit s)."""
    from mxbench import artifacts

    started = time.perf_counter()
    got = artifacts.local_data({"name": name}, root, store)
    missed = time.perf_counter()
    again = artifacts.local_data({"name": name}, root, store)
    hit = time.perf_counter()
    manifest = store.manifest("data", name)
    sizes = {rel: (root / rel).stat().st_size for rel in manifest["files"] if (root / rel).is_file()}
    if got["dir"] != again["dir"] or sizes != {rel: e["size"] for rel, e in manifest["files"].items()}:
        raise RuntimeError(f"{store}: the fetched data set {name} in {root} does not match its manifest")
    return missed - started, hit - missed


def store_parts(scratch: Path, args) -> bool:
    """Parts 1 and 2; whether both targets were met."""
    from mxbench import artifacts
    from standins.s3_server import S3Server

    dag_dir, key, data = real_run(scratch, args.images)
    s3_server = S3Server(scratch / "moto.log")
    try:
        s3_server.create_bucket(BUCKET)
        os.environ.update(s3_server.connection(CONN_ID))
        stores = {"s3": artifacts.Store(f"s3://{CONN_ID}@{BUCKET}/mxbench"),
                  "file": artifacts.Store(f"file://{scratch / 'file-store'}")}
        if any(store.is_home for store in stores.values()):
            raise RuntimeError("a store is MXBENCH_HOME itself: nothing would be copied")
        for store in stores.values():  # as prepare_data does, once
            artifacts.publish_data(data, store)
        size = sum(e["size"] for e in stores["s3"].manifest("data", data["name"])["files"].values())
        # one unmeasured round each: boto's client, its connection pool and imports warm up
        for name, store in stores.items():
            run_task_round(store, dag_dir, key, f"warm-up__{name}")
            progress_round(store, dag_dir, key, f"warm-up-progress__{name}", scratch / "progress")
            data_round(store, data["name"], scratch / "caches" / f"warm-up-{name}")
        times = {name: {"fetch": [], "publish": [], "progress": [], "miss": [], "hit": []} for name in stores}
        for i in range(args.repeats):
            for name in (("s3", "file") if i % 2 == 0 else ("file", "s3")):
                fetch, publish = run_task_round(stores[name], dag_dir, key, f"bench__{name}_{i}")
                progress = progress_round(stores[name], dag_dir, key, f"progress__{name}_{i}", scratch / "progress")
                miss, hit = data_round(stores[name], data["name"], scratch / "caches" / f"{name}-{i}")
                for part, value in (("fetch", fetch), ("publish", publish), ("progress", progress), ("miss", miss),
                                    ("hit", hit)):
                    times[name][part].append(value)
                shutil.rmtree(scratch / "caches" / f"{name}-{i}")
    finally:
        s3_server.stop()
        os.environ.pop(f"AIRFLOW_CONN_{CONN_ID.upper()}", None)
    ok = True
    print(f"\n1. per run task ({key}: a 1-epoch run folder), medians over {args.repeats}:")
    for name in stores:
        met = statistics.median(times[name]["publish"]) <= PUBLISH_TARGET_S
        ok &= met
        print(f"   {name:4}: fetch at start {median_ms(times[name]['fetch'])}   publish at end "
              f"{median_ms(times[name]['publish'])}   (publish target <= {PUBLISH_TARGET_S * 1000:.0f} ms: "
              f"{verdict(met)})")
        print(f"         progress publish while training (every 15 s; the logs grew) "
              f"{median_ms(times[name]['progress'])}")
    print(f"\n2. prepared data set {data['name']} ({size / 1e6:.1f} MB), fetched by a run task, medians over "
          f"{args.repeats}:")
    for name in stores:
        miss, hit = times[name]["miss"], times[name]["hit"]
        met = statistics.median(hit) <= HIT_TARGET_S
        ok &= met
        print(f"   {name:4}: miss (empty cache) {median_ms(miss)} = {size / 1e6 / statistics.median(miss):.0f} MB/s"
              f"   hit {median_ms(hit)}   (hit target <= {HIT_TARGET_S * 1000:.0f} ms: {verdict(met)})")
    return ok


# --- part 3: DAG runs on two real stacks ---------------------------------------------------------

def dag_run(stack, label: str, conf: dict, i: int) -> float:
    """Trigger DAG run ``i`` and wait for it; its wall time (s). Prints it, with the worker of
    prepare_data and of the run tasks (a run task on another worker fetches the data set from
    the store, unless an earlier DAG run left it in that worker's cache)."""
    token = stack.token("admin")
    path = f"/api/v2/dags/{DAG_ID}"
    answer = stack.call("POST", f"{path}/dagRuns", token, {"logical_date": None, "conf": conf})
    if answer.status != 200:
        raise RuntimeError(f"{label}: triggering failed: {answer.status} {answer.text[:500]}")
    run_path = f"{path}/dagRuns/{urllib.parse.quote(answer.json()['dag_run_id'], safe='')}"

    def done():
        found = stack.call("GET", run_path, token)
        return found.json() if found.status == 200 and found.json()["state"] in ("success", "failed") else None

    run = stack.wait_for(done, DAG_RUN_DEADLINE_S, f"{label}: DAG run {i + 1}", every=2)
    tis = stack.call("GET", f"{run_path}/taskInstances?limit=100", token).json()["task_instances"]
    if run["state"] != "success":
        failed = sorted(f"{ti['task_id']}[{ti['map_index']}]" for ti in tis if ti["state"] != "success")
        raise RuntimeError(f"{label}: DAG run {run['dag_run_id']} failed ({', '.join(failed)}); logs in {stack.logs}")
    wall = (datetime.fromisoformat(run["end_date"]) - datetime.fromisoformat(run["start_date"])).total_seconds()
    prepared = [ti["hostname"] for ti in tis if ti["task_id"] == "prepare_data"]
    ran = sorted(ti["hostname"] for ti in tis if ti["task_id"].endswith(".run_variant"))
    cold = " (the stack's caches empty: the data set is made)" if i == 0 else ""
    print(f"   {label:10} DAG run {i + 1}: {wall:5.1f} s; prepare_data on {', '.join(prepared)}, run tasks on "
          f"{', '.join(ran)}{cold}")
    return wall


def stack_part(scratch: Path, args) -> bool:
    """Part 3; whether the ratio target was met."""
    from standins import postgres  # a throwaway PostgreSQL server, as the tests make it
    from standins.airflow_stack import AirflowStack
    from standins.celery_stack import CeleryStack

    conf = {"preset": "cpu-demo", "only_variants": [MATRIX_VARIANT], "repeats": args.matrix_repeats, "epochs": 1,
            "synthetic_images": args.images, "launchers": ["local"]}
    print(f"\n3. DAG run wall time, {MATRIX_VARIANT} x {args.matrix_repeats} repeats, 1 epoch, {args.images} images, "
          f"{args.dag_runs} DAG run(s) per stack, alternating:")
    pg_root = Path(tempfile.mkdtemp(prefix="mxbench-artifacts-bench-pg-"))  # the server runs as postgres
    try:
        pg_ctl, _, port = postgres.start(pg_root)
    except RuntimeError as error:
        raise SystemExit(str(error)) from None
    stacks, left = {}, []
    try:
        # Celery first: its packages (Celery, asyncpg) are the ones that may be missing
        stacks["Celery+S3"] = CeleryStack(scratch / "celery-stack", postgres.url(port))
        stacks["Local+file"] = AirflowStack(scratch / "local-stack", env={"MXBENCH_ARTIFACTS": ""})  # the default
        for label, stack in stacks.items():
            started = time.monotonic()
            stack.prepare()
            stack.start()
            if stack.call("PATCH", f"/api/v2/dags/{DAG_ID}", stack.token("admin"), {"is_paused": False}).status != 200:
                raise RuntimeError(f"{label}: could not unpause {DAG_ID}")
            print(f"   {label} stack up in {time.monotonic() - started:.0f} s")
        walls = {label: [] for label in stacks}
        for i in range(args.dag_runs):
            for label in (list(stacks) if i % 2 == 0 else list(stacks)[::-1]):
                walls[label].append(dag_run(stacks[label], label, conf, i))
    finally:
        for stack in stacks.values():
            left += stack.stop()
        postgres.stop(pg_ctl)
        shutil.rmtree(pg_root, ignore_errors=True)
    if left:
        raise RuntimeError(f"processes outlived the stacks: {left}")
    celery_s, local_s = (statistics.median(walls[label]) for label in stacks)
    ratio = celery_s / local_s
    print(f"   median: Celery+S3 {celery_s:.1f} s, Local+file {local_s:.1f} s: ratio {ratio:.3f} "
          f"(target <= {WALL_RATIO_TARGET}: {verdict(ratio <= WALL_RATIO_TARGET)})")
    return ratio <= WALL_RATIO_TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="publish and data fetch rounds per store")
    parser.add_argument("--images", type=int, default=3000, help="synthetic training images (the demo's: 3000)")
    parser.add_argument("--dag-runs", type=int, default=4, help="DAG runs per stack in part 3")
    parser.add_argument("--matrix-repeats", type=int, default=2, help="repeats of the variant in part 3's matrix")
    parser.add_argument("--skip-dag-runs", action="store_true", help="leave out part 3 (the two Airflow stacks)")
    args, scratch = begin(parser, "artifacts-overhead")
    print(f"scratch folder: {scratch}")
    # before anything imports airflow (it reads its configuration once); the stacks set their own
    os.environ.update(MXBENCH_HOME=str(scratch / "home"), AIRFLOW_HOME=str(scratch / "airflow"),
                      AIRFLOW__CORE__LOAD_EXAMPLES="False",
                      # the aws provider logs each credential look-up at INFO, amid the figures
                      AIRFLOW__LOGGING__NAMESPACE_LEVELS="airflow.providers.amazon=WARNING")
    os.environ.pop("MXBENCH_ARTIFACTS", None)
    from mxbench_train.errors import MxbenchError

    ok = False
    try:
        ok = store_parts(scratch, args)
        if args.skip_dag_runs:
            print("\n3. DAG run wall time: NOT MEASURED (--skip-dag-runs)")
        else:
            ok = stack_part(scratch, args) and ok
    except (RuntimeError, AssertionError, MxbenchError) as exc:  # StackError is a RuntimeError; CeleryStack asserts
        print(f"failed: {exc}", file=sys.stderr)
        if not args.skip_dag_runs:
            print("(--skip-dag-runs leaves out part 3, the two Airflow stacks)", file=sys.stderr)
        ok = False
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())

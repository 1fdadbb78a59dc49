"""How long ``mxbench.store.baseline()`` takes on a well-filled results store (orchestration env):

    .venv/airflow/bin/python benchmarks/store_baseline.py [--repeats 100000] [--dag-runs 2000] [--calls 7]

Fills a scratch database with ``--repeats`` repeats over ``--dag-runs`` DAG runs a day apart and 20
variants (each DAG run measures about 12 of them on two launchers, twice each; three kinds of
machine; 5% of repeats failed), on SQLite and on a throwaway PostgreSQL server (started with
``standins.postgres`` as the tests' ``postgres_url`` fixture does, stopped afterwards). Then, per variant,
times ``baseline(url, variant, "local", machine, before=<the newest run>, runs=5)`` ``--calls``
times and prints the median per variant and their median and maximum.
Target: every variant's median at most 50 ms on both.
"""
import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins"))

from mxbench import store  # noqa: E402
from mxbench.store.schema import dag_runs, environments, repeats, variants  # noqa: E402
from standins import postgres  # noqa: E402

TARGET_MS = 50
T0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
MACHINES = ["cpu-box", "gpu-box-a", "gpu-box-b"]


def fill(url: str, total_repeats: int, total_dag_runs: int, seed: int = 1) -> dict:
    """Bulk-insert a realistic history straight into the tables; what was made."""
    rng = random.Random(seed)
    store.migrate(url)
    variant_ids = [f"variant-{i:02d}" for i in range(20)]
    fingerprints = {name: store.fingerprint({"cpu_model": name, "cpu_count": 8, "gpu": {}})[0] for name in MACHINES}
    per_run = total_repeats // total_dag_runs  # e.g. 50: 12 or 13 variants x 2 launchers x 2 repeats
    with store.engine(url).begin() as connection:
        connection.execute(variants.insert(), [{"id": v, "workers": 1, "batch_size": 32} for v in variant_ids])
        connection.execute(environments.insert(), [
            {"fingerprint": fp, "gpu_count": 0, "host_class": f"cpu: {name}", "first_seen": T0}
            for name, fp in fingerprints.items()])
        made = 0
        for n in range(total_dag_runs):
            when = T0 + timedelta(days=n)
            machine = fingerprints[rng.choice(MACHINES)]
            run_id = f"scheduled__{when:%Y-%m-%d}"
            chosen = rng.sample(variant_ids, -(-per_run // 4))
            rows = [{"dag_id": "mxbench_benchmark", "dag_run": run_id, "run_key": f"{v}__{launcher}__r{r}",
                     "variant": v, "launcher": launcher, "repeat": r, "environment": machine, "machine_set": "local",
                     "status": "ok" if rng.random() > 0.05 else "failed", "cause": None,
                     "samples_per_sec": rng.gauss(1000, 30), "started_at": when, "ended_at": when}
                    for v in chosen for launcher in ("local", "ssh") for r in (1, 2)][:per_run]
            for row in rows:
                if row["status"] != "ok":
                    row.update(samples_per_sec=None, cause="timeout")
            connection.execute(dag_runs.insert(), {
                "run_id": run_id, "dag_id": "mxbench_benchmark", "trigger": "scheduled", "logical_date": when,
                "measured_at": when, "started_at": when, "ended_at": when, "state": "ok", "runs_ok": len(rows),
                "runs_failed": 0, "environment": machine, "recorded_at": when, "mxnet_version": "1.9.1"})
            connection.execute(repeats.insert(), rows)
            made += len(rows)
    return {"repeats": made, "variants": variant_ids, "fingerprints": fingerprints,
            "newest": T0 + timedelta(days=total_dag_runs)}


def time_baselines(url: str, filled: dict, calls: int) -> dict:
    """Median milliseconds of baseline() per variant (each on the machine that ran it most)."""
    medians = {}
    for i, variant in enumerate(filled["variants"]):
        machine = list(filled["fingerprints"].values())[i % len(MACHINES)]
        found = store.baseline(url, variant, "local", machine, before=filled["newest"])  # warm the pool
        assert not found.empty, f"no baseline for {variant}: the fill is wrong"
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            store.baseline(url, variant, "local", machine, before=filled["newest"])
            seconds.append(time.perf_counter() - start)
        medians[variant] = statistics.median(seconds) * 1000
    return medians


def report(name: str, filled: dict, medians: dict, fill_s: float) -> bool:
    worst = max(medians.values())
    ok = worst <= TARGET_MS
    print(f"{name}: {filled['repeats']} repeats filled in {fill_s:.0f} s; baseline() median per variant: "
          f"median {statistics.median(medians.values()):.1f} ms, max {worst:.1f} ms "
          f"(target <= {TARGET_MS} ms: {'met' if ok else 'MISSED'})")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100_000)
    parser.add_argument("--dag-runs", type=int, default=2_000)
    parser.add_argument("--calls", type=int, default=7)
    args = parser.parse_args()
    results = []
    scratch = Path(tempfile.mkdtemp(prefix="mxbench-store-bench-"))
    try:
        url = f"sqlite:///{scratch / 'results.db'}"
        start = time.perf_counter()
        filled = fill(url, args.repeats, args.dag_runs)
        fill_s = time.perf_counter() - start
        results.append(report("SQLite", filled, time_baselines(url, filled, args.calls), fill_s))

        # a folder of its own, not inside the scratch one: the server runs as postgres, not root
        pg_root = Path(tempfile.mkdtemp(prefix="mxbench-store-bench-pg-"))
        try:
            pg_ctl, _, port = postgres.start(pg_root)
        except RuntimeError as error:
            raise SystemExit(str(error)) from None
        try:
            url = postgres.create_database(postgres.url(port), "bench")
            start = time.perf_counter()
            filled = fill(url, args.repeats, args.dag_runs)
            fill_s = time.perf_counter() - start
            # what autovacuum would have done by the time a store holds this much
            with store.engine(url).connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(sa.text("ANALYZE"))
            results.append(report("PostgreSQL", filled, time_baselines(url, filled, args.calls), fill_s))
            store.engine(url).dispose()
        finally:
            postgres.stop(pg_ctl)
            shutil.rmtree(pg_root, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

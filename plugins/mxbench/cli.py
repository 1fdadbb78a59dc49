"""``mxbench``: read MXNet logs, rebuild a report, compare two launchers or two runs.

    mxbench parse LOG [LOG ...] [--json]
    mxbench report RUN_DIR [--url URL]
    mxbench compare RUN_DIR [OTHER_RUN_DIR] [--launchers A B] [--target-gap G]
    mxbench history VARIANT [--launcher L] [--fingerprint F] [--url URL]
    mxbench builds VARIANT [--launcher L] [--fingerprint F] [--url URL]
    mxbench import [RUN_DIR ...] [--url URL]
    mxbench fetch DAG_ID RUN_ID [--to DIR]
    mxbench scaling RUN_DIR [RUN_DIR ...] [--threshold T] [--throughput X] [--seed S]
    mxbench scaling --store [--url URL] [--dag-id D ...] [--launcher L] [--fingerprint F] [--build B]
                    [--since DATE] [--threshold T] [--throughput X] [--seed S]
    mxbench doctor [--seconds S] [--root DIR]
"""
import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from mxbench.results.metrics import NoSpeedLines, compare_speeds, run_metrics
from mxbench.results.parse import parse_log


def parse_one(path: str) -> dict:
    parsed = parse_log(path)
    result = {"log": path, "workers": parsed.workers, "samples_per_sec": None, "sec_per_epoch": None,
              "epoch_samples_per_sec": None, "warmup_excluded": None, "epochs": [], "p2p": parsed.p2p,
              "notices": parsed.notices, "restarts": parsed.restarts, "unparsed_lines": parsed.unparsed,
              "unparsed_count": parsed.unparsed_count}
    try:
        metrics = run_metrics(parsed, path)
    except NoSpeedLines as exc:
        return {**result, "error": str(exc)}
    return {**result, **{k: metrics[k] for k in ("workers", "samples_per_sec", "sec_per_epoch",
                                                  "epoch_samples_per_sec", "warmup_excluded", "epochs")}}


def cmd_parse(args) -> int:
    results = []
    for path in args.logs:
        try:
            results.append(parse_one(path))
        except OSError as exc:
            results.append({"log": path, "error": f"cannot read {path}: {exc.strerror or exc}"})
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(f"== {r['log']}")
            if "samples_per_sec" in r and r["samples_per_sec"] is not None:
                print(f"workers {r['workers']}, steady-state {r['samples_per_sec']:.1f} samples/s, "
                      f"{r['sec_per_epoch'] if r['sec_per_epoch'] is not None else 'n/a'} s/epoch"
                      + ("" if r["warmup_excluded"] else " (one epoch: includes warm-up)"))
                if r["restarts"]:
                    print(f"restarted at line {', '.join(map(str, r['restarts']))}; measured the last run")
                if r["epochs"]:
                    print(pd.DataFrame(r["epochs"]).to_string(index=False))
                if r["p2p"]:
                    p = r["p2p"]
                    print(f"P2P: {p['enabled_pairs']} of {p['total_pairs']} GPU pairs enabled")
                    print("\n".join(p["matrix"]))
                for notice in r["notices"]:
                    print(f"MXNet: {notice}")
                print(f"{r['unparsed_count']} unparsed lines")
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"error: {r['error']}", file=sys.stderr)
    return 1 if errors else 0


def cmd_report(args) -> int:
    from mxbench.report import build_report
    from mxbench.run_folder import DagRunFolder
    from mxbench.stages.pipeline import join, parse_all, stored_aa_noise
    from mxbench.store import default_url

    folder = DagRunFolder(args.run_dir)
    parse_all(folder)
    join(folder, stored_aa_noise(folder, args.url or default_url()))
    built = build_report(folder)
    print(built["text"])
    print(f"report: {built['html']}")
    return 0


def cmd_fetch(args) -> int:
    from mxbench.artifacts import download
    from mxbench_train.errors import MxbenchError

    try:
        folder = download(args.dag_id, args.run_id, Path(args.to))
    except MxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(folder)
    return 0


def band_gap(text: str) -> float:
    """``--target-gap``: a share between 0 and 1 (0.05: the band 95%..105%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1 (0.05: ±5%), got {text}")
    return value


def cmd_compare(args) -> int:
    from mxbench.run_folder import DagRunFolder, load_table

    first = load_table(DagRunFolder(args.run_dir).table("runs"))
    if args.other:
        a, b = load_table(DagRunFolder(args.other).table("runs")), first
        names, keys = (Path(args.other).name, Path(args.run_dir).name), ["variant", "launcher"]
    elif args.launchers:
        a = first[first["launcher"] == args.launchers[0]]
        b = first[first["launcher"] == args.launchers[1]]
        names, keys = tuple(args.launchers), ["variant"]
    else:
        print("error: give a second run folder, or --launchers A B to compare within one", file=sys.stderr)
        return 2
    ok_a, ok_b = (t[(t["status"] == "ok") & t["samples_per_sec"].notna()] for t in (a, b))
    speeds_a = {k: g["samples_per_sec"] for k, g in ok_a.groupby(keys)}
    rows = []
    for key, speeds_b in ok_b.groupby(keys, sort=False):
        if key not in speeds_a:
            continue
        cmp = compare_speeds(speeds_a[key], speeds_b["samples_per_sec"], *names, target_gap=args.target_gap)
        rows.append({**dict(zip(keys, key)), "verdict": cmp["verdict"]})
    if not rows:
        print("error: no variant has successful runs on both sides", file=sys.stderr)
        return 1
    print(f"speed ratio {names[0]} / {names[1]}")
    for row in rows:
        print(" ".join(str(v) for k, v in row.items() if k != "verdict") + ": " + row["verdict"])
    return 0


def cmd_scaling(args) -> int:
    """The report's scaling model section as text: fit, PROJECTED sizes, hold-out, costs; of DAG run
    folders (several pooled: e.g. one DAG run per link rate, from which the model learns the
    network), or (``--store``) of every stored DAG run of the setups."""
    from mxbench.report import scaling_tables
    from mxbench.run_folder import DagRunFolder, load_table, read_json

    if args.store == bool(args.run_dirs):
        print("error: give DAG run folders, or --store for every stored DAG run", file=sys.stderr)
        return 2
    if args.store:
        return scaling_of_store(args)
    tables, variants = [], {}
    for run_dir in args.run_dirs:
        folder = DagRunFolder(Path(run_dir))
        runs = load_table(folder.table("runs"))
        if runs.empty:
            print(f"error: {run_dir} has no tables/runs.csv (run `mxbench report` on it first)", file=sys.stderr)
            return 1
        tables.append(runs)
        variants.update(scaling_tables.variants_of(read_json(folder.request, {}) or {}))
    runs = pd.concat(tables, ignore_index=True)
    first = DagRunFolder(Path(args.run_dirs[0]))
    prices, why = scaling_tables.prices_or_why()
    found = scaling_tables.fitted(runs, variants, args.threshold, args.seed)
    if not found:
        print(f"no setup has {scaling_tables.MIN_SIZES} or more sizes measured: no scaling model")
    else:
        print_models(found, prices, args.threshold, args.throughput,
                     scaling_tables.images_per_epoch(read_json(first.data, {}) or {}))
    whose = "this DAG run's cost" if len(tables) == 1 else "these DAG runs' cost"
    print(f"\n== {whose}" + (f" ({why})" if why else ""))
    print(scaling_tables.run_cost_table(runs, {"runs": [{"variant": v} for v in variants.values()]},
                                        prices).to_string(index=False))
    return 0


def print_models(found, prices, threshold: float, throughput, images_per_epoch=None) -> None:
    """The scaling model's lines and tables, as the report shows them."""
    from mxbench.report import scaling_tables

    print("\n".join(scaling_tables.holdout_lines(found, threshold)))
    print("\n== terms of the step time (seconds per unit of each term's feature)")
    print(scaling_tables.terms_table(found).to_string(index=False))
    print("\n== measured sizes and PROJECTED ones (the model's, not measured)")
    print(scaling_tables.curve_table(found, prices, images_per_epoch).to_string(index=False))
    if throughput:
        print("\n" + "\n".join(scaling_tables.cheapest_line(found, prices, throughput)))


def scaling_of_store(args) -> int:
    """``mxbench scaling --store``: the model fitted over every stored DAG run of the setups, on one
    kind of machine (bisect probes never: they measure old builds on purpose)."""
    from mxbench import store
    from mxbench.report import scaling_tables
    from mxbench.report.builds_view import machine_text
    from mxbench.results import stored

    url = args.url or store.default_url()
    rows = store.read_history(url, launcher=args.launcher, fingerprint=args.fingerprint, dag_ids=args.dag_id)
    rows = rows[~rows["dag_id"].isin(store.PROBE_DAG_IDS)] if not args.dag_id else rows
    if args.since:
        rows = rows[pd.to_datetime(rows["measured_at"], utc=True) >= args.since]
    if args.build:
        rows = rows[rows["build"] == args.build]
    rows = stored.sized(rows, store.read_sizes(url))
    if rows.empty:
        print(f"error: no measured runs stored in {store.shown(url)} for these choices", file=sys.stderr)
        return 1
    try:
        machine = stored.one_machine(rows)
    except stored.MixedMachines as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    runs, variants = stored.fit_inputs(rows)
    machine = machine_text(machine, store.machine_names(url))
    builds = list(dict.fromkeys(rows.sort_values("measured_at")["build"]))
    dags = ", ".join(sorted(rows["dag_id"].unique()))
    print(f"From {store.shown(url)}: {runs.groupby(['dag_id', 'run_id']).ngroups} DAG runs of {dags}, "
          f"{rows['measured_at'].min():%Y-%m-%d} to {rows['measured_at'].max():%Y-%m-%d}, {len(runs)} measured "
          f"repeats, machine {machine}; MXNet build{'s' if len(builds) > 1 else ''} {', '.join(map(str, builds))}"
          + (" (pooled: a build's own speed counts as noise; --build takes one)" if len(builds) > 1 else ""))
    prices, why = scaling_tables.prices_or_why()
    if why:
        print(why)
    found = scaling_tables.fitted(runs, variants, args.threshold, args.seed)
    if not found:
        print(f"no setup has {scaling_tables.MIN_SIZES} or more sizes measured: no scaling model")
        return 0
    print_models(found, prices, args.threshold, args.throughput)
    return 0


def cmd_history(args) -> int:
    from mxbench import store
    from mxbench.report.builds_view import machine_text
    from mxbench.results.scaling_model import rate_text

    url = args.url or store.default_url()
    found = store.read_history(url, args.variant, args.launcher, args.fingerprint)
    if found.empty:
        print(f"error: no results for variant {args.variant}", file=sys.stderr)
        return 1
    names = store.machine_names(url)
    shown = found.assign(measured_at=found["measured_at"].map(lambda t: t.strftime("%Y-%m-%d %H:%M")),
                         machine=found["environment"].map(lambda fp: machine_text(fp, names)),
                         link=found["link_bits"].map(lambda bits: rate_text(bits) if bits == bits and bits else None))
    # build: what ran (the version the trainer reported), which need not be the package asked for;
    # link: the rate of the link between its hosts, where it crossed one that said (revision 0011)
    columns = ["measured_at", "dag_id", "run_id", "trigger", "mxnet_package", "build", "runtime", "launcher", "repeat",
               "machine", "status", "samples_per_sec", "link"]
    print(shown[columns].astype(object).where(shown[columns].notna(), "-").to_string(index=False))
    return 0


def cmd_builds(args) -> int:
    """``mxbench builds VARIANT``: per series, the builds in order, each build's speed and its change
    from the build before (``report.builds_view``); a bisect's probes are left out."""
    from mxbench import store
    from mxbench.report.builds_view import builds_lines, builds_view, manifest_or_none

    url = args.url or store.default_url()
    found = store.history(url, args.variant, args.launcher, args.fingerprint)
    found = found[~found["dag_id"].isin(store.PROBE_DAG_IDS)]
    if found.empty:
        print(f"error: no results for variant {args.variant}", file=sys.stderr)
        return 1
    print("\n".join(builds_lines(builds_view(found, manifest_or_none(), store.machine_names(url)))))
    return 0


def cmd_import(args) -> int:
    from mxbench import config, store

    folders = [Path(d) for d in args.run_dirs] or sorted(p for p in (config.home() / "runs").glob("*") if p.is_dir())
    missing = [str(d) for d in folders if not d.is_dir()]
    if missing:
        print(f"error: {', '.join(missing)} is not a folder", file=sys.stderr)
        return 1
    from mxbench.report.builds_view import machine_text

    url = args.url or store.default_url()
    for result in store.import_runs(url, folders):
        if "skipped" in result:
            print(result["skipped"], file=sys.stderr)
        else:
            print(f"{result['dag_id']}/{result['run_id']}: {result['repeats']} repeats recorded "
                  f"(machine {machine_text(result['fingerprint'], store.machine_names(url))})")
    return 0


def seed(text: str) -> int:
    """A bootstrap's seed, as numpy takes it: a whole number 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number 0 or more")
    return value


def positive(text: str) -> float:
    """A rate wanted (samples/s): a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number above 0")
    return value


def utc_date(text: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(text, tz="UTC")
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (YYYY-MM-DD)") from None


def build_parser():
    parser = argparse.ArgumentParser(prog="mxbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="read MXNet training logs (any vintage)")
    p.add_argument("logs", nargs="+")
    p.add_argument("--json", action="store_true", help="one JSON object per log")
    p.set_defaults(func=cmd_parse)
    p = sub.add_parser("report", help="rebuild a DAG run's tables and report from its files")
    p.add_argument("run_dir")
    p.add_argument("--url", help="results database with the A/A calibrations shown beside the ratios "
                                 "(default: $MXBENCH_RESULTS_URL, else results.db under $MXBENCH_HOME)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("fetch", help="copy a DAG run's published files out of the artifact store ($MXBENCH_ARTIFACTS) "
                                     "into a folder, to read them or rebuild the report there")
    p.add_argument("dag_id")
    p.add_argument("run_id")
    p.add_argument("--to", default=".", help="the folder to put it in (default: here)")
    p.set_defaults(func=cmd_fetch)
    p = sub.add_parser("compare", help="speed ratio of two launchers, or of two DAG runs, per variant")
    p.add_argument("run_dir")
    p.add_argument("other", nargs="?", help="a second DAG run folder: ratio other / run_dir")
    p.add_argument("--launchers", nargs=2, metavar=("A", "B"), help="ratio A / B within run_dir")
    p.add_argument("--target-gap", type=band_gap, default=0.05,
                   help="the band a ratio must be shown inside to read 'within the band': 100%% ± this (default 0.05)")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("scaling", help="the scaling model of a DAG run folder, or of every stored DAG run (--store): "
                                       "fitted terms, measured and PROJECTED sizes with prediction intervals, the "
                                       "largest size predicted from the others, costs from MXBENCH_PRICES")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="DAG run folders, pooled (e.g. one per link rate); or --store")
    p.add_argument("--store", action="store_true",
                   help="fit every stored DAG run of the setups, on one kind of machine (not a bisect's probes)")
    p.add_argument("--url", help="with --store: the results store (default: $MXBENCH_RESULTS_URL, else "
                                 "$MXBENCH_HOME/results.db)")
    p.add_argument("--dag-id", action="append", help="with --store: only this DAG's runs (repeatable; default: every "
                                                     "DAG's but mxbench_bisect's)")
    p.add_argument("--launcher", help="with --store: only this launcher's runs")
    p.add_argument("--fingerprint", help="with --store: this kind of machine (environments.fingerprint); needed "
                                         "where the store holds several")
    p.add_argument("--build", help="with --store: only runs of this MXNet build (the version the trainer reported)")
    p.add_argument("--since", type=utc_date, help="with --store: only DAG runs measured on or after this date "
                                                  "(YYYY-MM-DD, UTC)")
    p.add_argument("--threshold", type=float, default=0.8, help="efficiency to report the size it falls below at")
    p.add_argument("--throughput", type=positive, help="samples/s wanted: the cheapest size that reaches it")
    p.add_argument("--seed", type=seed, default=0, help="the bootstrap's seed (0 or more)")
    p.set_defaults(func=cmd_scaling)
    p = sub.add_parser("history", help="every stored repeat of a variant, oldest first (the results store), with "
                                       "the build asked for (mxnet_package), the one that ran (build: the version "
                                       "the trainer reported), the interpreter or image (runtime) and the rate of "
                                       "the link between its hosts (link)")
    series_arguments(p)
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("builds", help="what each MXNet build did to a variant's speed: per launcher, machine and "
                                      "setup, the builds in manifest order, each one's samples/s and its change from "
                                      "the build before, with its interval and verdict (the results store)")
    series_arguments(p)
    p.set_defaults(func=cmd_builds)
    p = sub.add_parser("import",
                       help="record DAG run folders in the results store (default: all of $MXBENCH_HOME/runs)")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    p.add_argument("--url", help="the results store (default: $MXBENCH_RESULTS_URL, else $MXBENCH_HOME/results.db)")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("doctor", help="what makes this machine a poor benchmark host (load, CPU governor and turbo, "
                                      "swap, transparent huge pages, CPU pressure and steal, GPU processes, "
                                      "persistence mode and clocks), each with its fix; changes nothing")
    p.add_argument("--seconds", type=float, default=1.0, help="the window for CPU pressure and steal (default 1)")
    p.add_argument("--root", default="/", help="read proc/ and sys/ under this folder (default /)")
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser("dags-folder", help="print the folder of mxbench's DAG files (an installed package ships them): "
                                           "a deployment's [core] dags_folder, or what it copies there")
    p.set_defaults(func=cmd_dags_folder)
    return parser


def cmd_dags_folder(args) -> int:
    from mxbench import config

    print(config.dags_folder())
    return 0


def cmd_doctor(args) -> int:
    from mxbench.hosts import doctor

    print(doctor.report(doctor.diagnose(Path(args.root), args.seconds)))
    return 0


def series_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that pick one variant's stored series: ``history`` and ``builds`` share them."""
    p.add_argument("variant")
    p.add_argument("--launcher")
    p.add_argument("--fingerprint", help="only this kind of machine (environments.fingerprint)")
    p.add_argument("--url", help="the results store (default: $MXBENCH_RESULTS_URL, else $MXBENCH_HOME/results.db)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in ("history", "builds", "import", "scaling"):
        return args.func(args)
    from mxbench.store import StoreError

    try:
        return args.func(args)
    except StoreError as exc:  # one line, no traceback: a wrong URL or an unreachable server
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

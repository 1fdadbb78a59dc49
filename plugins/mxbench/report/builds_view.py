"""The builds view: which MXNet build changed our speed, and by how much. Pure (pandas, the stats).

Per series (variant, launcher, machine, setup), the builds it measured in the order of their
``since`` date in the versions manifest (a build the manifest does not name: by its first DAG run),
each with its DAG runs, its median samples/s over their quiet repeats with a 95% bootstrap interval,
and the change from the build before with its interval and outcome: the launcher lines' own
statistics (``stats.verdict.compare`` over the two builds' repeats), so the label is theirs. A repeat
that ran beside other work (``contended``) is left out and counted. The step finder's change points
(``stats.change_points``) mark the build whose first DAG run starts a new level. ``builds_view`` makes
the tidy rows; ``builds_table`` (report and UI: links to each DAG run's report and to a bisect) and
``builds_lines`` (the command line) show them.
"""
import html
import json
from typing import Dict, List, Optional, Sequence

import pandas as pd

from mxbench.regression.bisect import find_build, label, start_conf
from mxbench.regression.regression_rule import MIN_DROP, dag_run_keys
from mxbench.report.links import UI, Links, report_href, segment
from mxbench.results.contention import flags
from mxbench.stats.change_points import mark_change_points
from mxbench.stats.floors import MIN_REPEATS
from mxbench.stats.verdict import LEVEL, bootstrap_ratio_ci, compare

SERIES = ["variant", "launcher", "environment", "setup_key"]
BUILDS_VIEW = "Builds: what each MXNet build did to speed"
BISECT_DAG = "mxbench_bisect"  # dags/mxbench_bisect.py
COLUMNS = ["variant", "launcher", "machine", "fingerprint", "setup", "build", "since", "asked", "dag_runs",
           "repeats", "contended", "samples_per_sec", "low", "high", "previous_build", "change", "change_low",
           "change_high", "outcome", "verdict", "level_change", "bisect"]


def builds_view(history: pd.DataFrame, manifest: Sequence = (), names: Optional[Dict[str, str]] = None) -> pd.DataFrame:
    """One row per series and build (``COLUMNS``), builds in order. ``history``: store rows
    (``store.history``: ``build``, ``status``, ``samples_per_sec``, ``contended``, ``measured_at`` or
    ``when``...); ``manifest``: the versions manifest's builds (``builds.mxnet_builds.load_manifest``), for
    their order and bisects; ``names``: fingerprint -> machine name (``store.machine_names``)."""
    if history.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = history.assign(when=pd.to_datetime(history["when"] if "when" in history else history["measured_at"],
                                              utc=True),
                          speed=pd.to_numeric(history["samples_per_sec"], errors="coerce"))
    rows = rows[(rows["status"] == "ok") & (rows["speed"] > 0)]
    rows = rows.assign(contended=flags(rows["contended"]) if "contended" in rows else False,
                       **{c: rows[c].astype(object).fillna("") for c in SERIES if c in rows})
    keys = dag_run_keys(rows)
    found: List[dict] = []
    by = [c for c in SERIES if c in rows]
    for series, group in rows.groupby(by, sort=True):
        where = {"environment": "", "setup_key": "", **dict(zip(by, series))}
        found += _series(where, group, keys, list(manifest), names or {})
    return pd.DataFrame(found, columns=COLUMNS)


def manifest_or_none() -> list:
    """The versions manifest's builds, for their order; none where it cannot be read (builds are
    then ordered by their first DAG run)."""
    from mxbench.builds.mxnet_builds import ManifestError, load_manifest

    try:
        return load_manifest()
    except ManifestError:  # the view stands without the manifest's order
        return []


def _since(group: pd.DataFrame, manifest: list) -> Optional[str]:
    """The manifest's since date of the build the rows asked for (package, else commit)."""
    for column in ("mxnet_asked", "mxnet_package"):
        for asked in group.get(column, pd.Series(dtype=object)).dropna().unique():
            matched = [b for b in manifest if asked == b.package]
            if len(matched) == 1:
                return str(matched[0].since)
    for commit in group.get("mxnet_commit", pd.Series(dtype=object)).dropna().unique():
        matched = [b for b in manifest if b.commit and b.commit == commit]
        if len(matched) == 1:
            return str(matched[0].since)
    return None


def _series(where: dict, rows: pd.DataFrame, keys: List[str], manifest: list, names: Dict[str, str]) -> List[dict]:
    quiet = rows[~rows["contended"]]
    levels = mark_change_points(quiet, keys) if not quiet.empty else pd.DataFrame()
    steps = {} if levels.empty else {
        row["build"]: row["change_point"] for row in levels[levels["change_point"].notna()].to_dict("records")}
    builds = []
    for build, group in rows.groupby("build", sort=False):
        since = _since(group, manifest)
        first = group["when"].min()
        builds.append((since or first.strftime("%Y-%m-%d"), first, build, group, since))
    builds.sort(key=lambda b: (b[0], b[1]))
    machine = where["environment"]
    found, previous = [], None
    for _, _, build, group, since in builds:
        speeds = [float(v) for v in group.loc[~group["contended"], "speed"]]
        runs = group.sort_values("when").drop_duplicates(keys)
        asked = ", ".join(dict.fromkeys(str(v) for v in group.get("mxnet_asked", pd.Series(dtype=object)).dropna()))
        row = {"variant": where["variant"], "launcher": where["launcher"], "machine": names.get(machine) or machine,
               "fingerprint": machine, "setup": where["setup_key"], "build": build, "since": since,
               "asked": asked, "dag_runs": [tuple(str(r[k]) for k in keys) for r in runs.to_dict("records")],
               "repeats": len(speeds), "contended": int(group["contended"].sum()),
               "samples_per_sec": float(pd.Series(speeds).median()) if speeds else None, "low": None, "high": None,
               "previous_build": None, "change": None, "change_low": None, "change_high": None, "outcome": None,
               "verdict": None, "level_change": steps.get(build), "bisect": None}
        if len(speeds) >= MIN_REPEATS:
            # the median's own interval: its ratio to a reference of one speed of 1
            row["low"], row["high"] = bootstrap_ratio_ci(speeds, [1.0], LEVEL)
        if previous is not None and speeds and previous["speeds"]:
            # the band: the smallest change the regression rule calls worth an alert (``regression_rule.MIN_DROP``)
            compared = compare(speeds, previous["speeds"], name=str(build), reference=str(previous["build"]),
                               target_gap=MIN_DROP)
            row.update(previous_build=previous["build"], change=compared.ratio - 1,
                       change_low=None if compared.ci_low is None else compared.ci_low - 1,
                       change_high=None if compared.ci_high is None else compared.ci_high - 1,
                       outcome=compared.outcome, verdict=compared.verdict,
                       bisect=_bisect(previous["asked"], asked, manifest, where))
        elif previous is not None:
            row["previous_build"] = previous["build"]
        found.append(row)
        previous = {"build": build, "speeds": speeds, "asked": asked}
    return found


def _bisect(good: str, bad: str, manifest: list, where: dict) -> Optional[dict]:
    """The bisect DAG's conf over the builds between two (by the packages they asked for), or None
    where the manifest has none between them or does not name both."""
    try:
        step = {"previous": label(manifest[find_build(good, manifest)]),
                "build": label(manifest[find_build(bad, manifest)])}
    except (ValueError, IndexError):
        return None
    return start_conf(step, manifest, where["variant"], where["launcher"])


class Machine(Links):
    """A machine by name in a table, its fingerprint a hover away (``<abbr>``); in text "name [fingerprint]".
    One the store has no name for reads "unnamed machine" and its fingerprint's first 8 digits (two
    such machines stay apart): never a bare fingerprint."""

    def __init__(self, name: str, fingerprint: str):
        named = name if name and name != fingerprint else f"{UNNAMED} {fingerprint[:8]}".strip()
        super().__init__(f"{named} [{fingerprint}]" if fingerprint else named)
        self.name, self.fingerprint = named, fingerprint

    def html(self) -> str:
        if not self.fingerprint:
            return html.escape(self.name)
        return f"<abbr title='{html.escape(self.fingerprint, quote=True)}'>{html.escape(self.name)}</abbr>"


UNNAMED = "unnamed machine"


def named_machines(fingerprints: pd.Series, names: Dict[str, str]) -> List[Machine]:
    """A table's machine column (fingerprints) as ``Machine`` cells; no machine stays as it is."""
    return [Machine(names.get(fp) or "", fp) if isinstance(fp, str) and fp else fp for fp in fingerprints]


def machine_text(fingerprint, names: Dict[str, str]) -> str:
    """A machine in plain text (the command line's): "name [fingerprint]"; "unknown" for none."""
    return str(Machine(names.get(fingerprint) or "", fingerprint)) if fingerprint else "unknown"


def _percent(value, low=None, high=None) -> str:
    if value is None or pd.isna(value):
        return "n/a"
    said = f"{value:+.1%}"
    return said + (f" [{low:+.1%}, {high:+.1%}]" if low is not None and pd.notna(low) else "")


def speed_text(row: dict) -> str:
    """"412 [398–425] (8 repeats)": the median samples/s with its 95% interval."""
    if row["samples_per_sec"] is None or pd.isna(row["samples_per_sec"]):
        return "n/a (no quiet repeat)"
    said = f"{row['samples_per_sec']:.4g}"
    if row["low"] is not None and pd.notna(row["low"]):
        said += f" [{row['low']:.4g}–{row['high']:.4g}]"
    return said + f" ({row['repeats']} repeat{'' if row['repeats'] == 1 else 's'})"


def change_text(row: dict) -> str:
    """"-20.1% [-22.0%, -18.3%], slower": the change from the build before, the verdict's label."""
    if row["previous_build"] is None or (isinstance(row["previous_build"], float) and pd.isna(row["previous_build"])):
        return "first build"
    if row["change"] is None or pd.isna(row["change"]):
        return f"from {row['previous_build']}: n/a (no quiet repeat)"
    return f"from {row['previous_build']}: {_percent(row['change'], row['change_low'], row['change_high'])}, " \
           f"{row['outcome']}"


def bisect_conf(conf: dict) -> str:
    """The bisect DAG's trigger conf (JSON) over the builds between two."""
    return json.dumps(conf, sort_keys=True)


def bisect_href() -> str:
    """The bisect DAG's page in the Airflow UI, where its trigger form takes the conf."""
    return f"{UI}dags/{segment(BISECT_DAG)}"


def builds_table(view: pd.DataFrame, dag_id: Optional[str] = None) -> pd.DataFrame:
    """The view for people: one line per series and build, each DAG run a link to its report, a
    bisect a link to its trigger form; the machine by name, its fingerprint beside it."""
    shown = []
    for row in view.to_dict("records"):
        runs = row["dag_runs"]
        run_links = Links(", ".join(r[-1] for r in runs),
                          [(r[-1], report_href(r[0], r[1])) for r in runs if len(r) == 2])
        conf = row["bisect"]
        shown.append({
            "series": f"{row['variant']} ({row['launcher']})",
            "machine": Machine(row["machine"], row["fingerprint"]),
            "MXNet build": row["build"] + (f" (since {row['since']})" if row["since"] else ""),
            "DAG runs": run_links, "samples/s [95% CI]": speed_text(row),
            "change [95% CI], verdict": change_text(row),
            "contended repeats left out": row["contended"],
            "level change starts": "" if row["level_change"] is None or pd.isna(row["level_change"])
            else f"here ({row['level_change']:+.1%})",
            "bisect (trigger mxbench_bisect with this conf)": Links(
                bisect_conf(conf), [(f"bisect {conf['good_build']} → {conf['bad_build']}", bisect_href()),
                                    (bisect_conf(conf), bisect_href())]) if conf else ""})
    return pd.DataFrame(shown)


def builds_lines(view: pd.DataFrame) -> List[str]:
    """The view as text lines (the command line's): a header per series, a line per build, and
    under it its DAG runs."""
    lines: List[str] = []
    for (variant, launcher, machine, fingerprint, setup), group in view.groupby(
            ["variant", "launcher", "machine", "fingerprint", "setup"], sort=False):
        setup_text = f", setup {setup}" if setup else ""
        lines.append(f"{variant} ({launcher}) on {Machine(machine, fingerprint)}{setup_text}")
        for row in group.to_dict("records"):
            since = f" (since {row['since']})" if row["since"] else ""
            left = f"; {row['contended']} contended repeat(s) left out" if row["contended"] else ""
            step = "" if row["level_change"] is None or pd.isna(row["level_change"]) else \
                f"; level change starts here ({row['level_change']:+.1%})"
            lines.append(f"  {row['build']}{since}: {speed_text(row)} samples/s of {len(row['dag_runs'])} DAG "
                         f"run(s); {change_text(row)}{left}{step}")
            lines.append(f"    DAG runs: {', '.join(r[-1] for r in row['dag_runs'])}")
    return lines

"""Did a variant get slower than its baseline? The regression DAG's rule, its confirmation and false-discovery control.

The baseline is the last ``BASELINE_RUNS`` successful DAG runs of the same variant and launcher
on the same hardware fingerprint (the results store picks them). The rule reuses the launcher
verdict's statistics: a regression is called only when the permutation test over the repeats
says the two differ (p < α), the bootstrap interval of the speed ratio lies wholly below 100%,
and the drop is at least ``MIN_DROP``: noise alone must not alert (the test and the interval
keep false alarms under α, and the minimum drop keeps a real but negligible shift quiet; the
baseline's DAG runs differ from day to day, which the pooled repeats do not show, and the minimum
drop is what keeps that quiet too), while a real step of 10% must. A step of exactly the minimum
drop is caught about half the time: set ``min_drop`` below the smallest step that must be caught.
A suspected regression gets confirmation rounds first (``suspected``), and across the series of
one DAG run Benjamini–Hochberg controls the false calls (``controlled``). Pure: no Airflow, no
database.
"""
import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from mxbench import config
from mxbench.stats import verdict
from mxbench.stats.family import benjamini_hochberg
from mxbench_train.redaction import redact

MIN_DROP = 0.05  # a drop smaller than this is not worth an alert, however certain
BASELINE_RUNS = 5  # DAG runs in a baseline
MIN_BASELINE_RUNS = 2  # fewer earlier DAG runs than this: "no baseline yet"
# this share of the smallest drop: the least drop a regression's median shows, and the first
# rounds' median drop that gets confirmation rounds
SUSPECT_SHARE = 0.5


# between the baseline's builds in a table cell: a wheel's package has spaces ("mxnet @ https://...")
BUILDS_SEPARATOR = "; "


def baseline_builds(cell) -> List[str]:
    """The builds of a finding's ``baseline_builds`` cell (``Finding.to_dict``'s)."""
    text = "" if cell is None or (isinstance(cell, float) and math.isnan(cell)) else str(cell)
    return [build.strip() for build in text.split(BUILDS_SEPARATOR.strip()) if build.strip()]


@dataclass
class Finding:
    variant: str
    launcher: str
    status: str  # regression | improved | ok | no baseline yet | no result
    current: Optional[float] = None  # median samples/s of this DAG run's repeats
    baseline: Optional[float] = None  # median over the baseline's repeats
    change: Optional[float] = None  # current / baseline - 1
    ci_low: Optional[float] = None  # of current / baseline - 1
    ci_high: Optional[float] = None
    p_value: Optional[float] = None
    n: int = 0
    n_baseline: int = 0
    baseline_runs: List[str] = field(default_factory=list)
    baseline_builds: List[str] = field(default_factory=list)  # the MXNet builds the baseline measured
    message: str = ""
    q_value: Optional[float] = None  # p adjusted over every series this DAG run checked (Benjamini–Hochberg)
    noise_cv: Optional[float] = None  # the spread of one run, from the latest A/A calibration on this hardware
    noise_from: str = ""  # that calibration's DAG run
    detectable: Optional[float] = None  # the drop these repeats detect at that noise (80% power), ≥ min_drop

    def to_dict(self):
        return {**asdict(self), "baseline_runs": " ".join(self.baseline_runs),
                "baseline_builds": BUILDS_SEPARATOR.join(self.baseline_builds)}


def usable_speeds(values) -> List[float]:
    """The speeds a comparison can use: as floats, missing, infinite, NaN and non-positive ones left out."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]


# what a series says where every measured run of a DAG run had other work on its hosts
CONTENDED_NOT_COMPARED = "contended: not compared"


def feeding_dags(dag_ids: Optional[Iterable[str]] = None) -> List[str]:
    """The DAGs whose runs may be a baseline: ``dag_ids``, default the deployer's
    ``MXBENCH_BASELINE_DAGS`` (``config.baseline_dags``), a bisect's (``config.PROBE_DAG_IDS``) never.
    ``store.baseline`` and the history page's judgement (``mark_regressions``) both take them from here."""
    return [d for d in (config.baseline_dags() if dag_ids is None else dag_ids) if d not in config.PROBE_DAG_IDS]


def quiet_repeats(rows: pd.DataFrame) -> Tuple[pd.DataFrame, int]:
    """(the measured repeats of ``rows`` a comparison may use, how many measured ones it leaves out
    as contended): status ok with a speed, and not contended (other work on their hosts,
    ``results.contention``; a run that could not tell, or stored before revision 0009, counts as
    quiet). A contended run neither raises an alarm nor hides one: it is never compared."""
    ok = rows[(rows["status"] == "ok") & rows["samples_per_sec"].notna()]
    if "contended" not in ok.columns:
        return ok, 0
    busy = ok["contended"].astype(object).eq(True)  # as ``contention.flags`` reads the column
    return ok[~busy], int(busy.sum())


def left_out(count: int, whose: str = "") -> str:
    """How many contended runs a comparison left out, and why."""
    return f"{count} contended run{'s' if count != 1 else ''}{whose} left out (other work on their hosts)"


def check(variant: str, launcher: str, current: Sequence[float], baseline: Sequence[float],
          baseline_runs: Sequence[str] = (), min_drop: float = MIN_DROP, alpha: float = verdict.ALPHA,
          min_baseline_runs: int = MIN_BASELINE_RUNS) -> Finding:
    """``current``: this DAG run's per-repeat samples/s; ``baseline``: the baseline's, pooled over
    its DAG runs (``baseline_runs``, their ids)."""
    current, baseline = usable_speeds(current), usable_speeds(baseline)
    finding = Finding(variant, launcher, "no result", n=len(current), n_baseline=len(baseline),
                      baseline_runs=list(baseline_runs))
    if not current:
        finding.message = f"{variant} ({launcher}): no measured repeat in this run"
        return finding
    finding.current = float(pd.Series(current).median())
    if len(set(baseline_runs)) < min_baseline_runs or len(baseline) < verdict.MIN_REPEATS \
            or len(current) < verdict.MIN_REPEATS:
        finding.status = "no baseline yet"
        finding.message = (f"{variant} ({launcher}): no baseline yet ({len(set(baseline_runs))} earlier DAG run(s) "
                           f"on this hardware, {min_baseline_runs} needed, and {verdict.MIN_REPEATS} repeats a side)")
        return finding
    finding.baseline = float(pd.Series(baseline).median())
    ratio = finding.current / finding.baseline
    low, high = verdict.bootstrap_ratio_ci(current, baseline)
    p = verdict.permutation_p(current, baseline)
    finding.change, finding.ci_low, finding.ci_high, finding.p_value = ratio - 1, low - 1, high - 1, p
    if p < alpha and high < 1 and ratio <= 1 - min_drop:
        finding.status = "regression"
    elif p < alpha and low > 1 and ratio >= 1 + min_drop:
        finding.status = "improved"
    else:
        finding.status = "ok"
    finding.message = (f"{variant} ({launcher}): {finding.status}: {finding.current:.1f} samples/s against a baseline "
                       f"of {finding.baseline:.1f} ({ratio - 1:+.1%}, 95% CI [{low - 1:+.1%}, {high - 1:+.1%}], "
                       f"p = {p:.3g}; {len(current)} vs {len(baseline)} repeats from {len(set(baseline_runs))} "
                       f"DAG runs)")
    return finding


def suspected(current: Sequence[float], baseline: Sequence[float], min_drop: float = MIN_DROP):
    """(whether the first rounds look like a regression, their median over the baseline's): at
    least ``SUSPECT_SHARE`` of ``min_drop`` below it. Looser than the rule, so that a real drop
    is rarely left unconfirmed; the alert itself is judged over every round."""
    ratio = float(pd.Series(usable_speeds(current)).median() / pd.Series(usable_speeds(baseline)).median())
    return ratio <= 1 - SUSPECT_SHARE * min_drop, ratio


def dag_run_keys(frame: pd.DataFrame) -> List[str]:
    """The columns that name a DAG run in ``frame``: run ids are unique per DAG only, so the DAG's
    id too where the rows have it (store rows do)."""
    return [c for c in ("dag_id", "run_id") if c in frame.columns]


def dag_run_names(frame: pd.DataFrame) -> pd.Series:
    """Each row's DAG run for people: its run id, or ``<dag id>/<run id>`` where DAG runs of two
    DAGs share that id."""
    if "dag_id" not in frame.columns or frame.empty:
        return frame["run_id"].astype(str)
    shared = frame.groupby("run_id")["dag_id"].transform("nunique") > 1
    return frame["run_id"].astype(str).where(~shared, frame["dag_id"].astype(str) + "/" + frame["run_id"].astype(str))


def detectable_drop(cv: float, n: int, m: int, alpha: float = verdict.ALPHA, power: float = verdict.POWER) -> float:
    """The drop that ``n`` repeats against ``m`` detect with ``power`` when one run's log speed
    spreads by ``cv`` (a normal approximation of the rule's test)."""
    z = NormalDist().inv_cdf
    return -math.expm1(-(z(1 - alpha / 2) + z(power)) * cv * math.sqrt(1 / n + 1 / m))


def with_noise(finding: Finding, noise: Optional[dict], min_drop: float = MIN_DROP) -> Finding:
    """``finding`` with the A/A noise floor (``calibration.noise_floor``'s row) as its noise estimate:
    the drop its repeats detect at that spread, or the alert's minimum drop where that is larger.
    Within-run noise: a baseline pooled over days spreads more, so it is a floor."""
    if not noise or finding.status not in ("ok", "regression", "improved"):
        return finding
    finding.noise_cv, finding.noise_from = float(noise["cv"]), str(noise.get("dag_run") or "")
    finding.detectable = max(min_drop, detectable_drop(finding.noise_cv, finding.n, finding.n_baseline))
    source = finding.noise_from or "this run"
    finding.message += (f"; A/A within-run noise CV {finding.noise_cv:.1%} per run ({source}): "
                        f"{finding.n} vs {finding.n_baseline} repeats detect a drop of {finding.detectable:.1%} or more"
                        + (" (the minimum drop alerted)" if finding.detectable == min_drop else ""))
    return finding


def dag_run_findings(runs: pd.DataFrame, baselines: dict, min_drop: float = MIN_DROP,
                     noise: Optional[dict] = None) -> List[Finding]:
    """A finding per variant and launcher of this DAG run (``runs``: its runs table). ``baselines``:
    (variant, launcher) -> the baseline's repeats (``run_id``, ``dag_id``, ``samples_per_sec``,
    ``mxnet_package``); ``noise``: (variant, launcher) -> the latest A/A noise floor on its hardware."""
    findings = []
    for (variant, launcher), group in runs.groupby(["variant", "launcher"], sort=False):
        base = baselines.get((variant, launcher))
        base = base if base is not None else pd.DataFrame(columns=["run_id", "samples_per_sec", "mxnet_package"])
        # contended repeats neither raise nor hide an alert: only quiet ones are judged (the store's
        # baseline holds quiet ones only, and says how many it left out)
        ok, busy = quiet_repeats(group)
        finding = check(variant, launcher, ok["samples_per_sec"], base["samples_per_sec"],
                        list(dict.fromkeys(dag_run_names(base))), min_drop=min_drop)
        if busy and ok.empty:
            finding.status = "no result"
            finding.message = f"{variant} ({launcher}): {CONTENDED_NOT_COMPARED} ({left_out(busy)})"
        elif busy:
            finding.message += f"; {left_out(busy, ' of this DAG run')}"
        if base.attrs.get("contended_left_out"):
            finding.message += f"; {left_out(int(base.attrs['contended_left_out']), ' of the baseline')}"
        finding.baseline_builds = sorted({str(b) for b in base.get("mxnet_package", pd.Series(dtype=str)).dropna()})
        findings.append(with_noise(finding, (noise or {}).get((variant, launcher)), min_drop))
    return controlled(findings)


def controlled(findings: List[Finding], alpha: float = verdict.ALPHA) -> List[Finding]:
    """``findings`` with each tested one's ``q_value`` over all of them, and a regression or
    improvement whose q is not below ``alpha`` turned "ok": with many series checked every night,
    some would pass p < α by chance alone."""
    tested = [f for f in findings if f.p_value is not None]
    p_values: List[float] = [f.p_value for f in tested]  # type: ignore[misc]  # tested: only those with a p
    for finding, q in zip(tested, benjamini_hochberg(p_values)):
        finding.q_value = q
        if finding.status in ("regression", "improved") and q >= alpha:
            finding.message = finding.message.replace(f": {finding.status}: ", ": ok: ", 1) + (
                f"; would be {'a ' if finding.status == 'regression' else ''}{finding.status} alone, but not across "
                f"the {len(tested)} series checked (Benjamini–Hochberg q = {q:.3g} ≥ {alpha})")
            finding.status = "ok"
    return findings


def false_alert_chance(cv: float, n: int, m: int, alpha: float = verdict.ALPHA, first: Optional[int] = None,
                       min_drop: float = MIN_DROP) -> float:
    """How likely noise alone makes one series' check a regression, when one run's log speed
    spreads by ``cv``, with ``n`` repeats against ``m``: the mean log ratio falls below its
    two-sided α bound (the rule's test, in a normal approximation; its interval and the FDR control
    only lower it); with confirmation (``first`` rounds first, ``n`` in all), also the first
    rounds' ratio falls ``SUSPECT_SHARE`` of ``min_drop`` below 1 (``suspected``), the two
    correlated as the first rounds are part of all of them."""
    from scipy.stats import multivariate_normal

    z = NormalDist().inv_cdf(alpha / 2)
    if not first or first >= n:
        return alpha / 2
    all_sd, first_sd = cv * math.sqrt(1 / n + 1 / m), cv * math.sqrt(1 / first + 1 / m)
    correlation = (1 / n + 1 / m) * cv ** 2 / (all_sd * first_sd)
    bound = math.log1p(-SUSPECT_SHARE * min_drop) / first_sd
    return float(multivariate_normal(mean=[0, 0], cov=[[1, correlation], [correlation, 1]]).cdf([z, bound]))


def false_alerts_per_month(findings: pd.DataFrame, checks_per_month: float = 30, first: Optional[int] = None,
                           min_drop: float = MIN_DROP, rounds: Optional[int] = None) -> Optional[float]:
    """The false alerts to expect in a month of such DAG runs (``checks_per_month``, daily: 30)
    from the measured noise: the sum over the series (``findings``: regression.csv rows with
    ``noise_cv``, ``n`` and ``n_baseline``) of ``false_alert_chance``, with ``rounds`` repeats
    where given (``first`` + the confirmation rounds: a series that alerts has run them, whatever
    this DAG run's did); None where no series has a noise estimate."""
    if findings.empty or "noise_cv" not in findings.columns:
        return None
    rows = findings.dropna(subset=["noise_cv"])
    rows = rows[(rows["n"] > 0) & (rows["n_baseline"] > 0)]
    if rows.empty:
        return None
    return checks_per_month * sum(false_alert_chance(float(r["noise_cv"]), rounds or int(r["n"]),
                                                     int(r["n_baseline"]), first=first, min_drop=min_drop)
                                  for r in rows.to_dict("records"))


def alert(findings: Sequence[dict], build: Optional[str]) -> Optional[str]:
    """Why the DAG run fails, one line per regression (``findings``: ``Finding.to_dict()`` rows):
    variant, baseline, current, change with its interval, both MXNet builds and the baseline's
    runs; None when nothing regressed."""
    lines = [f"REGRESSION {f['message']}; this build: {redact(build or 'unknown')}; baseline builds: "
             f"{redact(', '.join(baseline_builds(f['baseline_builds']))) or 'unknown'}; baseline runs: "
             f"{_text(f['baseline_runs'])}"
             for f in findings if f["status"] == "regression"]
    return "\n".join(lines) or None


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else ", ".join(str(value).split())


def mark_regressions(history: pd.DataFrame, runs: int = BASELINE_RUNS, min_drop: float = MIN_DROP,
                     baseline_dags: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """Each DAG run of one series' history (``run_id``, ``dag_id`` where there are several DAGs,
    ``when``, ``samples_per_sec``, ``status``, ``contended`` where stored) of the DAGs that feed a
    baseline (``feeding_dags(baseline_dags)``: the regression check's own), judged as the regression
    DAG judges it: its quiet repeats against those of the ``runs`` DAG runs of those DAGs before it
    that measured a quiet one (``quiet_repeats``, as ``store.baseline`` takes them). One row per DAG run
    (its ``dag_id`` and ``run_id``) with ``status`` (regression, improved, ok, no baseline yet;
    ``CONTENDED_NOT_COMPARED`` where all its measured runs were contended; "not judged" for a DAG
    run of a DAG that feeds no baseline, which the regression check never judges either), its median
    samples/s and ``left_out``, how many contended runs of it were left out."""
    keys = dag_run_keys(history)
    columns = [*keys, "when", "samples_per_sec", "status", "left_out"]
    measured = history[(history["status"] == "ok") & history["samples_per_sec"].notna()]
    if measured.empty:
        return pd.DataFrame(columns=columns)
    quiet, _ = quiet_repeats(measured)
    measured = measured.assign(dag_run=list(zip(*(measured[k] for k in keys))))
    quiet = measured.loc[quiet.index]
    feeding = set(feeding_dags(baseline_dags))
    fed = quiet if "dag_id" not in quiet.columns else quiet[quiet["dag_id"].isin(feeding)]
    first: dict = {}
    for dag_run, when in zip(measured["dag_run"], measured["when"]):
        first[dag_run] = min(first.get(dag_run, when), when)
    order = sorted(first, key=lambda dag_run: (first[dag_run], str(dag_run)))
    fed_runs = set(fed["dag_run"])
    rows = []
    for i, dag_run in enumerate(order):
        when = first[dag_run]
        this = measured[measured["dag_run"] == dag_run]
        mine = quiet[quiet["dag_run"] == dag_run]
        busy = len(this) - len(mine)
        dag = dict(zip(keys, dag_run))
        if "dag_id" in dag and dag["dag_id"] not in feeding:
            status, speed = "not judged", float(this["samples_per_sec"].median())
        elif mine.empty:
            status, speed = CONTENDED_NOT_COMPARED, None
        else:
            # the last ``runs`` earlier DAG runs of the feeding DAGs with a quiet repeat: store.baseline's choice
            feeding_before = [d for d in order[:i] if d in fed_runs]
            base = fed[fed["dag_run"].isin(feeding_before[-runs:] if runs else [])]
            finding = check("", "", mine["samples_per_sec"], base["samples_per_sec"], list(base["dag_run"]),
                            min_drop=min_drop)
            status, speed = finding.status, finding.current
        rows.append({**dag, "when": when, "samples_per_sec": speed, "status": status, "left_out": busy})
    return pd.DataFrame(rows, columns=columns)


def judge_history(history: pd.DataFrame, runs: int = BASELINE_RUNS, min_drop: float = MIN_DROP,
                  baseline_dags: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """``history`` (store rows with ``when``) with each DAG run's ``verdict`` from ``mark_regressions``
    (over the DAGs that feed the regression check's baselines, ``baseline_dags`` default the
    deployer's, contended runs left out: ``left_out`` says how many), every variant, launcher, kind
    of machine and setup judged against its own earlier DAG runs, and its ``change_point``: the level
    change over the whole series that starts at that DAG run (``change_points.mark_change_points``;
    NaN where none does)."""
    from mxbench.stats.change_points import mark_change_points

    parts = []
    # runs of one variant id that measured another setup (an override: revision 0007's setup_key) are another series
    series = ["variant", "launcher", "environment"] + (["setup_key"] if "setup_key" in history.columns else [])
    for _, group in history.groupby(series, dropna=False):
        keys = dag_run_keys(group)
        verdicts = mark_regressions(group, runs, min_drop, baseline_dags)[[*keys, "status", "left_out"]].rename(
            columns={"status": "verdict"})
        changes = mark_change_points(group, keys)[[*keys, "change_point"]]
        parts.append(group.merge(verdicts, on=keys, how="left").merge(changes, on=keys, how="left"))
    if not parts:
        return history.assign(verdict=pd.Series(dtype=object), left_out=pd.Series(dtype=float),
                              change_point=pd.Series(dtype=float))
    return pd.concat(parts, ignore_index=True)

"""How far a setup scales: a fitted step-time model, its intervals, projections and a hold-out check.

Why a model and not a line through the points: efficiency falls for reasons that do not grow alike
(the device interconnect within a machine, pairs of GPUs without peer-to-peer access, the links
to the parameter servers), and only a model with a term for each can say which one will cost at
a size nobody measured. The step time (seconds for one step, every device at its
``batch_per_device`` images; ``metrics.add_scaling``'s names) is

    T = compute + c_dev·x_dev + c_p2p·x_p2p + c_net·x_net

compute: the same at every size (the global batch divides across the devices); x_dev = (m-1)/m
for m devices on a host, the share of the gradient each exchanges within its machine; x_p2p =
x_dev·q, q the share of the host's device pairs without P2P (MXNet's P2P matrix, ``p2p_pairs``);
x_net: gradients per step through the busiest host link to the parameter servers (``dist_*``
kvstores over several hosts; servers placed round-robin as mxnet.tools.launch does).

The network learned from the runs (``network_from_links``): where a multi-host size was measured at
two or more link rates (the ssh hosts' ``mxbench_link_rate``, recorded per run) and its hosts read
the bytes they sent (``metrics.link_bytes_per_step``), x_net becomes link seconds a step,
x_net·8·gradient_bytes/link_bits, gradient_bytes the measured bytes per step over x_net: the
same size at two rates differs only there, so c_net (the share of the link's time that shows in the
step: 1 for none hidden behind compute) is identified from the rates, not from the 1-host sizes,
whose setups differ in more than the link. It counts as identified only where the same sizes' runs
alone put it above 0 with an interval that excludes 0 (``link_share``, ``identified_network``); else
it is marked not identified, and why. PROJECTED sizes keep the fastest measured rate.
Throughput = devices·batch_per_device / T; efficiency = T(1 device) / T.

Fit: non-negative least squares on each size's mean step time (no cost is negative; a term
fitted at zero is dropped and its degree of freedom returned). A term whose feature never varies
among the measured sizes cannot be identified: it is left out, and a projection that needs more
of it than was measured gets an allowance, a stated range per unit of the feature (by default 0
to ``UNSEEN_SHARE`` of the compute step), so its interval widens instead of claiming precision;
so does an unknown P2P layout (q anywhere from 0 to 1). Term intervals: a bootstrap over the runs
(each size's repeats resampled, with the fit's residuals), seeded. Prediction intervals: a t
quantile on the residual degrees of freedom times sqrt(residual variance + the bootstrap's
variance of the prediction): with three to five sizes a normal or percentile interval is far too
narrow. Validation (``holdout``): the largest size predicted from the others.
"""
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import optimize, stats

TERMS = ("compute", "device link", "pairs without P2P", "network")
LEVEL = 0.95
UNSEEN_SHARE = 0.5  # an unidentified term may add up to this share of the compute step, per unit of it
BOOTSTRAP = 400
FACTORS = (2, 4)  # projections: 2x and 4x the largest measured size


@dataclass(frozen=True)
class Config:
    """One size of one setup. ``servers`` 0: no parameter servers (kvstore device or local);
    ``no_p2p`` None: the P2P layout is not known (GPUs without the trainer's P2P notice)."""
    devices: int
    hosts: int = 1
    workers: int = 1
    servers: int = 0
    batch_per_device: int = 1
    no_p2p: Optional[float] = 0.0
    link_bits: Optional[float] = None  # each host's link rate, bits/s: with gradient_bytes, x_net in link seconds
    gradient_bytes: Optional[float] = None  # bytes per step through the busiest link, per gradient (x_net)

    @property
    def per_host(self) -> float:
        return self.devices / self.hosts


@dataclass(frozen=True)
class Point:
    config: Config
    speeds: Tuple[float, ...]  # samples/s of each measured repeat
    link_bits: Optional[float] = None  # as the runs recorded them, before network_from_links uses them
    bytes_per_step: Optional[float] = None  # through the busiest host's link (median of the runs)

    @property
    def steps(self) -> np.ndarray:
        return self.config.devices * self.config.batch_per_device / np.asarray(self.speeds, float)


def link_load(workers: int, hosts: int, servers: int) -> float:
    """Gradients per step through the busiest host link, either way, with ``workers`` and
    ``servers`` spread round-robin over ``hosts``: each worker sends 1/servers of its gradient to
    every server and pulls as much back; traffic between roles on one host stays off the link."""
    if hosts < 2 or servers < 1:
        return 0.0
    w = np.bincount(np.arange(workers) % hosts, minlength=hosts)
    s = np.bincount(np.arange(servers) % hosts, minlength=hosts)
    inbound, outbound = s / servers * (workers - w), w * (servers - s) / servers
    return float(max(inbound.max(), outbound.max()))


def servers_wanted(config: Config, tolerance: float = 0.05) -> Optional[int]:
    """The fewest parameter servers whose busiest link carries within ``tolerance`` of the least
    any number up to twice the workers gives; None on one host (no link to the servers)."""
    if config.hosts < 2:
        return None
    loads = {s: link_load(config.workers, config.hosts, s) for s in range(1, 2 * max(config.workers, config.hosts) + 1)}
    best = min(loads.values())
    return min(s for s, load in loads.items() if load <= best * (1 + tolerance) + 1e-12)


def features(config: Config, no_p2p: Optional[float] = None) -> np.ndarray:
    x_dev = (config.per_host - 1) / config.per_host
    q = config.no_p2p if no_p2p is None else no_p2p
    x_net = link_load(config.workers, config.hosts, config.servers)
    if config.link_bits and config.gradient_bytes:
        x_net *= 8 * config.gradient_bytes / config.link_bits
    return np.array([1.0, x_dev, x_dev * (q or 0.0), x_net])


def rate_text(bits: float) -> str:
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= size:
            return f"{bits / size:g} {unit}"
    return f"{bits:g} bit/s"


def links_learned(points: Sequence[Point]) -> bool:
    """Whether the fit's network term is in link seconds (``network_from_links`` learned it)."""
    return any(p.config.link_bits and p.config.gradient_bytes for p in points)


def network_from_links(points: Sequence[Point]) -> Tuple[List[Point], str]:
    """(the points, a line on the network term). Where one multi-host size was measured at two or
    more link rates and every multi-host point knows its rate and bytes sent, each point's config
    gets the setup's gradient_bytes and its link rate (1-host sizes and projections: the fastest
    measured), so x_net is link seconds. Else the configs keep neither (points of one size at
    several rates become one) and the line says why the network term is still an allowance."""
    linked = [p for p in points if link_load(p.config.workers, p.config.hosts, p.config.servers) > 0]
    rates = sorted({p.link_bits for p in linked if p.link_bits})
    by_size: Dict[Config, set] = {}
    for p in linked:
        by_size.setdefault(p.config, set()).add(p.link_bits)
    why = ("no run crossed a link between hosts" if not linked else
           "the runs recorded no link rate (an ssh connection's mxbench_link_rate)" if not rates else
           "a run of several hosts recorded no link rate" if not all(p.link_bits for p in linked) else
           f"no size of several hosts was measured at two link rates (measured: "
           f"{', '.join(map(rate_text, rates))})" if max(len(r) for r in by_size.values()) < 2 else
           "some runs of several hosts read no bytes sent (a trainer from before mxbench read them)"
           if not all(p.bytes_per_step for p in linked) else "")
    if why:
        merged: Dict[Config, Tuple[float, ...]] = {}
        for p in points:
            merged[p.config] = merged.get(p.config, ()) + p.speeds
        return ([Point(c, speeds) for c, speeds in merged.items()],
                f"network: not learned from the runs ({why}): a PROJECTED size that needs more of it than was "
                f"measured assumes an allowance")
    gradient = float(np.median([(p.bytes_per_step or 0.0) / link_load(p.config.workers, p.config.hosts,
                                                                        p.config.servers) for p in linked]))
    fastest = rates[-1]
    learned = [replace(p, config=replace(p.config, link_bits=p.link_bits or fastest, gradient_bytes=gradient))
               for p in points]
    return learned, (f"network: learned from runs at link rates {', '.join(map(rate_text, rates))} "
                     f"({gradient / 1e3:,.1f} kB a step through the busiest host's link per gradient): its unit is "
                     f"a second of link time (8·bytes/rate); PROJECTED sizes at {rate_text(fastest)}")


@dataclass(frozen=True)
class Fit:
    points: Tuple[Point, ...]
    coef: np.ndarray  # per TERMS, seconds per unit of the feature; 0 for a term not fitted
    coef_low: np.ndarray
    coef_high: np.ndarray
    seen: Tuple[bool, ...]  # per TERMS: identified from the points (fitted, maybe at zero)
    df: int
    sigma: float  # residual sd of a size's mean step time; NaN: not known (no interval)
    boot: np.ndarray  # bootstrap coefficients, one row per replicate
    level: float

    @property
    def residuals(self) -> np.ndarray:
        return np.array([p.steps.mean() for p in self.points]) - self.design() @ self.coef

    def design(self) -> np.ndarray:
        return np.array([features(p.config) for p in self.points])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return optimize.nnls(x, y)[0]


def _identified(x: np.ndarray) -> List[int]:
    active = [0]
    for j in range(1, x.shape[1]):
        trial = active + [j]
        if np.ptp(x[:, j]) > 1e-9 and len(x) > len(trial) and np.linalg.matrix_rank(x[:, trial]) == len(trial):
            active = trial
    return active


def fit(points: Sequence[Point], level: float = LEVEL, seed: int = 0, replicates: int = BOOTSTRAP) -> Fit:
    """The step-time model of one setup's sizes (``points``: at least two distinct sizes). Where the
    network term is in link seconds and ``link_share`` can judge it (one size at two rates, more than
    one run a rate), its coefficient is that share, pinned, and the other terms are fitted to what
    it leaves: the 1-host sizes' other differences then cannot pull it."""
    points = tuple(points)
    x = np.array([features(p.config) for p in points])
    y = np.array([p.steps.mean() for p in points])
    seen = _identified(x)
    net = TERMS.index("network")
    judged = link_share(points, level) if links_learned(points) and net in seen else None
    pinned, share, share_se, share_df, share_low, share_high = False, 0.0, 0.0, 1, 0.0, 0.0
    if judged is not None and judged[3] >= 1:
        pinned, (share, share_low, share_high, share_df) = True, judged
        share_se = (share_high - share) / stats.t.ppf(0.5 + level / 2, share_df)
        share = max(share, 0.0)
    free = [j for j in seen if not (pinned and j == net)]
    coef_active = _nnls(x[:, free], y - share * x[:, net])
    active = [j for j, c in zip(free, coef_active) if j == 0 or c > 0]
    coef = np.zeros(len(TERMS))
    coef[active] = _nnls(x[:, active], y - share * x[:, net])
    coef[net] += share
    resid, df = y - x @ coef, len(points) - len(active) - int(pinned)
    sigma, df_sigma = _sigma(points, resid, df)
    rng = np.random.default_rng(seed)
    scaled = resid * np.sqrt(len(points) / df) if df > 0 else np.zeros_like(resid)
    boot = np.zeros((replicates, len(TERMS)))
    for b in range(replicates):
        moved = [(rng.choice(p.steps, len(p.steps)).mean() - p.steps.mean()) * _unbias(len(p.steps)) for p in points]
        y_star = x @ coef + rng.choice(scaled, len(points)) + np.array(moved)
        share_b = max(share + share_se * rng.standard_t(share_df), 0.0) if pinned else 0.0
        boot[b, active] = _nnls(x[:, active], y_star - share_b * x[:, net])
        boot[b, net] += share_b
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
    if pinned:  # the share's own t interval: a few hundred draws of a t on 2 df do not find its tails
        low[net], high[net] = max(share_low, 0.0), share_high  # as the share itself, never below 0
    return Fit(points, coef, low, high, tuple(j in seen for j in range(len(TERMS))), df_sigma, sigma, boot, level)


def _unbias(n: int) -> float:
    """A resampled mean varies by (n-1)/n of the mean's variance: this undoes it."""
    return float(np.sqrt(n / (n - 1))) if n > 1 else 0.0


def _sigma(points: Sequence[Point], resid: np.ndarray, df: int) -> Tuple[float, int]:
    """The sd of a size's mean step time about the model, and its degrees of freedom. The residuals
    hold misfit and the repeats' noise; the repeats alone (pure error) hold the noise. Where a
    lack-of-fit F test (5%) finds no misfit, the two pool (more degrees of freedom, so a t quantile
    that is not absurd with three sizes); where it finds misfit, or there are no repeats, the
    residuals alone; with neither, NaN (no interval)."""
    pure = [(float(((p.steps - p.steps.mean()) ** 2).sum()), len(p.steps)) for p in points]
    pure_df = sum(n - 1 for _, n in pure)
    per_mean = sum(ss for ss, _ in pure) / pure_df * float(np.mean([1 / n for _, n in pure])) if pure_df else 0.0
    res_var = float(resid @ resid / df) if df > 0 else float("nan")
    if not pure_df or per_mean <= 0:
        return float(np.sqrt(res_var)), df
    if df == 0 or stats.f.sf(res_var / per_mean, df, pure_df) > 0.05:
        pooled = ((res_var * df if df else 0.0) + per_mean * pure_df) / (df + pure_df)
        return float(np.sqrt(pooled)), df + pure_df
    return float(np.sqrt(res_var)), df


def link_share(points: Sequence[Point], level: float = LEVEL) -> Optional[Tuple[float, float, float, int]]:
    """The share of the link's time that shows in the step, from the sizes measured at two or more
    link rates alone (each run's step time against its link seconds, an intercept per size: what
    else differs between sizes, the 1-host ones' setup included, cannot bias it), with its t
    interval: (share, low, high, residual degrees of freedom); None where no size was measured at
    two rates. With one run per rate there is no spread to judge it by: df 0, interval NaN."""
    by_size: Dict[Config, List[Point]] = {}
    for p in points:
        if p.config.link_bits and p.config.gradient_bytes:
            by_size.setdefault(replace(p.config, link_bits=None), []).append(p)
    xs, ys = [], []
    for same in by_size.values():
        x = np.concatenate([np.full(len(p.speeds), features(p.config)[3]) for p in same])
        y = np.concatenate([p.steps for p in same])
        if np.ptp(x) > 0:
            xs.append(x - x.mean())
            ys.append(y - y.mean())
    if not xs:
        return None
    x, y = np.concatenate(xs), np.concatenate(ys)
    share = float(x @ y / (x @ x))
    df = len(x) - len(xs) - 1
    if df < 1:
        return share, float("nan"), float("nan"), 0
    resid = y - share * x
    half = stats.t.ppf(0.5 + level / 2, df) * float(np.sqrt(resid @ resid / df / (x @ x)))
    return share, share - half, share + half, df


def identified_network(model: Fit) -> Tuple[Fit, str]:
    """(the fit, a line on its network term) for a fit whose network term was learned from the link
    rates: identified where ``link_share`` is positive with an interval that excludes 0; else the
    fit marks the term not identified, so that a PROJECTED size needing more of it than was
    measured gets the allowance (a term fitted near 0 would claim the link costs nothing), and the
    line says why."""
    found = link_share(model.points, model.level)
    if found is None:  # network_from_links learned the rates from a size measured at two of them
        raise ValueError("no size was measured at two link rates")
    share, low, high, df = found
    if df >= 1 and low > 0:
        return model, (f"network: identified from the same size at two rates: {share:.2f} of the link's time shows "
                       f"in the step [{low:.2f}–{high:.2f}, {model.level:.0%}, {df} degrees of freedom]")
    j = TERMS.index("network")
    why = ("one run per rate leaves no spread to judge the link's cost against: 2 or more repeats"
           if df < 1 else f"{share:.2f} of the link's time, its {model.level:.0%} interval {low:.2f}–{high:.2f} "
           f"includes 0: at these rates the link's cost is within the runs' noise; a slower rate or more repeats "
           f"would show it")
    return (replace(model, seen=tuple(s and k != j for k, s in enumerate(model.seen))),
            f"network: not identified ({why}): a PROJECTED size that needs more of it than was measured assumes "
            f"an allowance")

@dataclass(frozen=True)
class Projection:
    config: Config
    step_s: float
    step_low: float
    step_high: float
    samples_per_sec: float
    low: float  # prediction interval of samples/s
    high: float
    efficiency: float
    efficiency_low: float
    efficiency_high: float
    projected: bool  # beyond the measured sizes (False: a measured size, fitted)
    assumed: Tuple[str, ...]  # allowances for terms the measured sizes could not identify
    servers_wanted: Optional[int]


def predict(model: Fit, config: Config, priors: Optional[Dict[str, Tuple[float, float]]] = None,
            projected: bool = True) -> Projection:
    """The model's step time, throughput and efficiency at ``config``, with a prediction interval
    (of a size's mean over as many repeats as the fit's sizes had). ``priors``: term -> (low, high)
    seconds per unit of its feature, for terms the points cannot identify."""
    unknown = config.no_p2p is None and config.per_host > 1
    lo_x, hi_x = (features(config, 0.0), features(config, 1.0)) if unknown else (features(config),) * 2
    mid_x = (lo_x + hi_x) / 2
    boot_var = float(np.var(model.boot @ mid_x))
    t = stats.t.ppf(0.5 + model.level / 2, model.df) if model.df > 0 else stats.norm.ppf(0.5 + model.level / 2)
    half = t * np.sqrt(model.sigma ** 2 + boot_var) if np.isfinite(model.sigma) else np.inf
    step, low, high = float(mid_x @ model.coef), float(lo_x @ model.coef - half), float(hi_x @ model.coef + half)
    measured_max = model.design().max(axis=0)
    extra, assumed = np.zeros(2), []
    for j, name in enumerate(TERMS):
        excess = hi_x[j] - measured_max[j]
        if j == 0 or model.seen[j] or excess <= 1e-9:
            continue
        a, b = (priors or {}).get(name, (0.0, UNSEEN_SHARE * model.coef[0]))
        extra += (a * excess, b * excess)
        assumed.append(f"{name}: not identified from the measured sizes; allowed {a * excess * 1e3:.1f}–"
                       f"{b * excess * 1e3:.1f} ms a step" + ("" if name in (priors or {}) else
                                                              f" (0 to {UNSEEN_SHARE:.0%} of the compute step "
                                                              f"per unit of the term)"))
    if unknown:
        assumed.append("P2P layout not known at this size: pairs without P2P taken anywhere from none to all")
    step, low, high = float(step + extra.mean()), float(max(low + extra[0], 0.0)), float(high + extra[1])
    # efficiency is the curve's: its interval is the bootstrap's (no new run's noise), allowances added
    tail = (1 - model.level) / 2 * 100
    base = model.boot[:, 0]
    eff_low = np.percentile(base / np.maximum(model.boot @ hi_x + extra[1], 1e-9), tail)
    eff_high = np.percentile(base / np.maximum(model.boot @ lo_x + extra[0], 1e-9), 100 - tail)
    images = config.devices * config.batch_per_device
    return Projection(config, step, low, high, images / step, images / high, images / low if low else np.inf,
                      float(model.coef[0] / step), float(eff_low), float(eff_high), projected, tuple(assumed),
                      servers_wanted(config))


def largest(points: Sequence[Point]) -> Point:
    """The most devices, then hosts, then the fastest link."""
    return max(points, key=lambda p: (p.config.devices, p.config.hosts, p.config.link_bits or 0.0))


def scaled_up(config: Config, factor: int) -> Config:
    """``factor`` times ``config``'s machines, each as it was: more hosts, one worker and one server per
    host where it had no servers (the seed's 2 machines x 4 GPUs shape), else workers and servers
    scaled alike."""
    hosts = config.hosts * factor
    if config.servers:
        return replace(config, devices=config.devices * factor, hosts=hosts, workers=config.workers * factor,
                       servers=config.servers * factor)
    return replace(config, devices=config.devices * factor, hosts=hosts, workers=hosts, servers=hosts)


def project(model: Fit, factors: Sequence[int] = FACTORS, priors=None) -> List[Projection]:
    """The fitted measured sizes, then ``factors`` times the largest (labelled projected)."""
    fitted = [predict(model, p.config, priors, projected=False) for p in model.points]
    top = largest(model.points).config
    return fitted + [predict(model, scaled_up(top, f), priors) for f in factors]


def threshold_size(model: Fit, threshold: float, priors=None, most_devices: int = 4096) -> dict:
    """The first size, measured or doubling from the largest, whose efficiency falls below
    ``threshold``: by the fit, and at the earliest the interval allows. None: not before ``most_devices``."""
    ladder = sorted((p.config for p in model.points), key=lambda c: (c.devices, c.hosts))
    top, factor = ladder[-1], 2
    while top.devices * factor <= most_devices:
        ladder.append(scaled_up(top, factor))
        factor *= 2
    found: Dict[str, Optional[int]] = {"fit": None, "earliest": None}
    for config in ladder:
        guess = predict(model, config, priors)
        if found["earliest"] is None and guess.efficiency_low < threshold:
            found["earliest"] = config.devices
        if found["fit"] is None and guess.efficiency < threshold:
            found["fit"] = config.devices
    return found


def holdout(points: Sequence[Point], priors=None, level: float = LEVEL, seed: int = 0,
            target: Optional[Point] = None) -> dict:
    """Predict the largest size (or ``target``) from the others: the error a reader sees beside a projection."""
    target = target or largest(points)
    rest = [p for p in points if p is not target]
    guess = predict(fit(rest, level, seed), target.config, priors)
    measured = float(target.config.devices * target.config.batch_per_device / target.steps.mean())
    return {"config": target.config, "measured": measured, "predicted": guess.samples_per_sec,
            "low": guess.low, "high": guess.high, "error": float(guess.samples_per_sec / measured - 1),
            "inside": bool(guess.low <= measured <= guess.high), "assumed": guess.assumed}


def no_p2p_share(p2p_pairs, gpus: bool, per_host: float) -> Optional[float]:
    """The share of a host's device pairs without P2P, from the runs table's ``p2p_pairs`` ("24/56");
    0 on one device or on CPU workers (no P2P to lack); None for GPUs whose run logged no P2P matrix."""
    if per_host <= 1 or not gpus:
        return 0.0
    if isinstance(p2p_pairs, str) and "/" in p2p_pairs:
        enabled, total = (float(part) for part in p2p_pairs.split("/"))
        return 1 - enabled / total if total else None
    return None


def setups(rows: Sequence[dict], variants: Dict[str, dict]) -> Dict[tuple, List[Point]]:
    """(launcher, num_layers, batch_per_device) -> one Point per variant and link rate with measured
    runs, from the runs table's rows and the request's variant dicts (``matrix.variants.Variant`` as
    JSON): the groups of ``metrics.add_scaling``; each Point with its runs' link rate and bytes a step
    (``network_from_links`` decides what the fit makes of them)."""
    speeds: Dict[tuple, list] = {}
    for row in rows:
        if row.get("status") == "ok" and row.get("samples_per_sec") == row.get("samples_per_sec") \
                and row.get("samples_per_sec") is not None and row.get("variant") in variants:
            key = (row["launcher"], int(row["num_layers"]), int(row["batch_per_device"]))
            speeds.setdefault(key, []).append(row)
    found: Dict[tuple, List[Point]] = {}
    for key, group in speeds.items():
        for variant_id, link in dict.fromkeys((r["variant"], _number(r.get("link_bits"))) for r in group):
            v = variants[variant_id]
            mine = [r for r in group if r["variant"] == variant_id and _number(r.get("link_bits")) == link]
            devices, hosts = int(mine[0]["devices"]), int(v.get("hosts") or 1)
            servers = int(v.get("workers") or 1) if str(v.get("kvstore", "")).startswith("dist") else 0
            p2p = next((r.get("p2p_pairs") for r in mine if isinstance(r.get("p2p_pairs"), str)), None)
            config = Config(devices, hosts, int(v.get("workers") or 1), servers, key[2],
                            no_p2p_share(p2p, bool(v.get("gpus_per_worker")), devices / hosts))
            sent = [b for b in (_number(r.get("link_bytes_per_step")) for r in mine) if b]
            found.setdefault(key, []).append(Point(config, tuple(float(r["samples_per_sec"]) for r in mine), link,
                                                   float(np.median(sent)) if sent else None))
    return found


def _number(value) -> Optional[float]:
    """A table cell as a positive number, or None (empty, NaN, zero)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) and number > 0 else None

"""The scaling model's section of the report and of ``mxbench scaling``: one set of tables for both;
and the history page's measured efficiency and cost by MXNet build (``build_table``).

Per setup (launcher, depth, images per device) with at least ``MIN_SIZES`` distinct sizes
measured: the fitted terms, the fit against the measured points (residuals), the projections at
2x and 4x the largest size (every one labelled PROJECTED), the size at which efficiency falls
below a threshold, the largest size predicted from the others (the error a reader should expect
of a projection), and costs where the deployer set a price (``config.prices``), "not set" where not.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pandas as pd

from mxbench.report.tables import fmt
from mxbench.results import cost, scaling_model

MIN_SIZES = 3
THRESHOLD = 0.8  # efficiency below which a size is reported as "stops scaling"
PROJECTED = "PROJECTED"
CPU_NOTE = ("CPU workers share this host's cores: the fit shows this machine's scaling, not MXNet's, and its "
            "projections to more machines assume each has cores of its own.")


@dataclass
class SetupModel:
    key: tuple  # (launcher, num_layers, batch_per_device)
    gpus: bool
    model: scaling_model.Fit
    curve: List[scaling_model.Projection]
    held: Optional[dict]
    threshold: dict
    notes: List[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        launcher, depth, per_device = self.key
        return f"{launcher}, ResNet-{depth}, {per_device}/device"


def variants_of(request: dict) -> Dict[str, dict]:
    return {run["variant"]["id"]: run["variant"] for run in (request or {}).get("runs", [])}


def models(runs: pd.DataFrame, request: dict, threshold: float = THRESHOLD, seed: int = 0) -> List[SetupModel]:
    """Every setup of a DAG run with ``MIN_SIZES`` or more distinct sizes measured, fitted and projected."""
    return fitted(runs, variants_of(request), threshold, seed)


def fitted(runs: pd.DataFrame, variants: Dict[str, dict], threshold: float = THRESHOLD,
           seed: int = 0) -> List[SetupModel]:
    """``models`` of a runs table and its variants (by id): one DAG run's, or the results store's
    over many (``results.stored.fit_inputs``)."""
    if runs.empty or "samples_per_sec" not in runs:
        return []
    rows = runs.astype(object).where(runs.notna(), None).to_dict("records")
    found = []
    for key, measured in scaling_model.setups(rows, variants).items():
        points, network = scaling_model.network_from_links(measured)
        if len({p.config for p in points}) < MIN_SIZES:  # a size at two link rates counts twice
            continue
        gpus = any(variants[r["variant"]].get("gpus_per_worker") for r in rows if r.get("variant") in variants
                   and r.get("launcher") == key[0])
        model = scaling_model.fit(points, seed=seed)
        notes = [network]
        if scaling_model.links_learned(points):
            model, identified = scaling_model.identified_network(model)
            notes.append(identified)
        found.append(SetupModel(key, gpus, model, scaling_model.project(model),
                                scaling_model.holdout(points, seed=seed),
                                scaling_model.threshold_size(model, threshold),
                                notes + ([] if gpus else [CPU_NOTE])))
    return found


def size(config: scaling_model.Config, gpus: bool) -> str:
    unit = "GPU" if gpus else "CPU worker"
    text = f"{config.devices} {unit}{'s' if config.devices != 1 else ''}"
    text += f" on {config.hosts} machines" if config.hosts > 1 else ""
    return text + (f" at {scaling_model.rate_text(config.link_bits)}" if config.hosts > 1 and config.link_bits else "")


def terms_table(found: List[SetupModel]) -> pd.DataFrame:
    rows = []
    for m in found:
        for j, term in enumerate(scaling_model.TERMS):
            from_links = term == "network" and scaling_model.links_learned(m.model.points)
            state = ("fitted" if m.model.coef[j] > 0 else "fitted at zero") if m.model.seen[j] \
                else "not identified by these sizes (an allowance where a projection needs it)"
            if from_links:  # learned, but maybe not identified: the network line says why (``identified_network``)
                state = ("fitted" if m.model.seen[j] else "not identified (see the network line; an allowance where "
                         "a projection needs it)") + " from the link rates (per second of link time)"
            rows.append({"setup": m.name, "term": term, "ms a step (per unit)": fmt(m.model.coef[j] * 1e3, 2),
                         f"{m.model.level:.0%} interval (bootstrap over runs)":
                             f"{fmt(m.model.coef_low[j] * 1e3, 2)}–{fmt(m.model.coef_high[j] * 1e3, 2)}"
                             if m.model.seen[j] else "", "state": state})
    return pd.DataFrame(rows)


def curve_table(found: List[SetupModel], prices: dict, images_per_epoch: Optional[float]) -> pd.DataFrame:
    """Measured sizes with the fit and its residual, then the projections, labelled, with costs."""
    rows = []
    for m in found:
        price = prices.get(m.key[0])
        measured = {p.config: p for p in m.model.points}
        for c in m.curve:
            point = measured.get(c.config) if not c.projected else None
            seen = c.config.devices * c.config.batch_per_device / point.steps.mean() if point else None
            epoch_s = images_per_epoch / c.samples_per_sec if images_per_epoch else None
            rows.append({
                "setup": m.name, "size": size(c.config, m.gpus), "kind": PROJECTED if c.projected else "measured",
                "samples/s measured": fmt(seen), "samples/s model": fmt(c.samples_per_sec),
                f"{m.model.level:.0%} prediction interval": f"{fmt(c.low)}–{fmt(c.high)}",
                "residual": fmt(seen / c.samples_per_sec - 1, 1, pct=True) if seen else "",
                "efficiency (model)": f"{fmt(c.efficiency, 1, pct=True)} [{fmt(c.efficiency_low, 1, pct=True)}–"
                                      f"{fmt(c.efficiency_high, 1, pct=True)}]",
                "servers wanted": "" if c.servers_wanted is None else str(c.servers_wanted),
                "cost / epoch": money(cost.per_epoch(price, c.config, epoch_s), price),
                "cost / million images": money(cost.per_million_images(price, c.config, c.samples_per_sec), price),
                "assumed": "; ".join(c.assumed)})
    return pd.DataFrame(rows)


def money(value: Optional[float], price: Optional[dict]) -> str:
    if not price:
        return cost.NOT_SET
    return "n/a" if value is None else f"{value:,.2f} {price.get('currency', '')}".rstrip()


def holdout_lines(found: List[SetupModel], threshold: float = THRESHOLD) -> List[str]:
    lines = []
    for m in found:
        h = m.held
        if h:
            lines.append(f"{m.name}: the largest size, {size(h['config'], m.gpus)}, predicted from the others: "
                         f"{fmt(h['predicted'])} samples/s [{fmt(h['low'])}–{fmt(h['high'])}], measured "
                         f"{fmt(h['measured'])}: error {h['error']:+.1%}, "
                         + ("inside" if h["inside"] else "OUTSIDE") + " its prediction interval.")
        fit_at, earliest = m.threshold["fit"], m.threshold["earliest"]
        lines.append(f"{m.name}: efficiency falls below {threshold:.0%} "
                     + (f"at {fit_at} devices by the fit" if fit_at else "at no size up to 4096 devices by the fit")
                     + (f", at {earliest} at the earliest its interval allows ({PROJECTED} sizes)." if earliest
                        else "."))
        lines += [f"{m.name}: {note}" for note in m.notes]
    return lines


def run_cost_table(runs: pd.DataFrame, request: dict, prices: dict) -> pd.DataFrame:
    """This DAG run's own cost: the machine time of its runs and the harness's part of it."""
    variants = variants_of(request)
    configs = {vid: scaling_model.Config(int(v.get("workers") or 1) * max(1, int(v.get("gpus_per_worker") or 0)),
                                   int(v.get("hosts") or 1)) for vid, v in variants.items()}
    rows = runs.astype(object).where(runs.notna(), None).to_dict("records") if not runs.empty else []
    spent = cost.dag_run_cost(rows, configs, prices)
    return pd.DataFrame([{"launcher": launcher, f"{e['unit']}-hours": fmt(e["hours"], 3),
                          "of which harness": fmt(e["harness_hours"], 3),
                          "cost": money(e["cost"], prices.get(launcher.removesuffix("-b"))),
                          "of which harness ": money(e["harness_cost"], prices.get(launcher.removesuffix("-b")))}
                         for launcher, e in spent.items()])


def cheapest_line(found: List[SetupModel], prices: dict, wanted: float) -> List[str]:
    lines = []
    for m in found:
        best = cost.cheapest(m.curve, prices.get(m.key[0]), wanted)
        if not prices.get(m.key[0]):
            lines.append(f"{m.name}: no price set for {m.key[0]} (MXBENCH_PRICES): cost {cost.NOT_SET}.")
        elif best is None:
            lines.append(f"{m.name}: no measured or projected size reaches {wanted:,.0f} samples/s.")
        else:
            p = best["projection"]
            lines.append(f"{m.name}: the cheapest size reaching {wanted:,.0f} samples/s is "
                         f"{size(p.config, m.gpus)} ({PROJECTED if p.projected else 'measured'}), "
                         f"{money(best['per_hour'], prices[m.key[0]])} an hour, "
                         f"{money(best['per_million_images'], prices[m.key[0]])} per million images"
                         + ("" if best["sure"] else "; its interval's low end falls short of it") + ".")
    return lines


def prices_or_why() -> tuple:
    """(the deployer's prices, a line saying why none are used, or "")."""
    from mxbench import config

    try:
        found = config.prices()
    except ValueError as exc:
        return {}, f"Costs not shown: {exc}"
    return found, "" if found else f"No prices set ({config.PRICES_ENV}): every cost is {cost.NOT_SET}."


def images_per_epoch(data: dict) -> Optional[float]:
    train = ((data or {}).get("records") or {}).get("train")
    return float(train) if train else None


def scaling_sections(runs: pd.DataFrame, request: dict, data: dict, figure, draw) -> list:
    """The report's sections: the model's (only where a setup has ``MIN_SIZES`` sizes; then ``draw``
    puts its plot at ``figure``, else an earlier build's is removed) and this DAG run's cost."""
    prices, why = prices_or_why()
    found = models(runs, request)
    sections: list = []
    if found:
        draw(found, figure)
        sections += [
            ("Scaling model: hold-out check and where efficiency falls (PROJECTED sizes are the model's, not "
             "measured)", holdout_lines(found)),
            ("Scaling model: terms of the step time", terms_table(found)),
            ("Scaling model: measured sizes and PROJECTED ones", curve_table(found, prices,
                                                                             images_per_epoch(data)))]
    else:
        figure.unlink(missing_ok=True)
    spent = run_cost_table(runs, request, prices) if "duration_s" in runs else pd.DataFrame()
    if not spent.empty:
        sections.append(("Cost of this DAG run (machine time of its runs; the harness's part: outside the trainer)"
                         + (f". {why}" if why else ""), spent))
    return sections


BUILD_TABLE = "Scaling efficiency and cost by MXNet build"


def build_table(efficiency: pd.DataFrame, prices: dict) -> pd.DataFrame:
    """``results.stored.efficiency_by_build`` for people: per model, launcher, machine, build and
    size, the DAG runs, the median speed, the efficiency against that build's 1-device variant
    (measured, not the model's) and the cost per million images where ``prices`` has the launcher's."""
    rows = []
    for r in efficiency.to_dict("records"):
        price = prices.get(str(r["launcher"]).removesuffix("-b"))
        config = scaling_model.Config(int(r["devices"]), int(r["hosts"]))
        eff = r["scaling_efficiency"]
        rows.append({"ResNet depth": r["num_layers"], "images per device": r["batch_per_device"],
                     "launcher": r["launcher"], "machine": r["environment"], "MXNet build": r["build"],
                     "devices": r["devices"] if r["hosts"] <= 1 else f"{r['devices']} on {r['hosts']} machines",
                     "variant": r["variant"], "DAG runs": r["dag_runs"],
                     "samples/s (median of runs)": fmt(r["samples_per_sec"]),
                     "efficiency vs 1 device": "no 1-device run of this build" if eff != eff or eff is None
                     else fmt(eff, 1, pct=True),
                     "cost / million images": money(cost.per_million_images(price, config, r["samples_per_sec"]),
                                                    price)})
    return pd.DataFrame(rows)

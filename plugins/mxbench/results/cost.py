"""What a run costs, from prices the deployer set (``config.prices``), never guessed.

A price is per device-hour or per machine-hour of one launcher's target; where none is set, every
cost here is None and the caller says "not set". Cost per epoch and per million images follow
from a size's throughput; a DAG run's cost from its runs' machine time (``duration_s``), of
which the harness's share is the time outside the trainer (``duration_s`` - ``trainer_wall_s``).
"""
from typing import Dict, List, Optional, Sequence

from mxbench.results.scaling_model import Config, Projection

NOT_SET = "not set"


def units(price: dict, config: Config) -> int:
    """How many of the price's units a size holds: devices, or machines (hosts)."""
    return config.devices if price["unit"] == "device" else config.hosts


def per_hour(price: Optional[dict], config: Config) -> Optional[float]:
    return price["per_hour"] * units(price, config) if price else None


def per_epoch(price: Optional[dict], config: Config, sec_per_epoch: Optional[float]) -> Optional[float]:
    hourly = per_hour(price, config)
    return hourly * sec_per_epoch / 3600 if hourly is not None and sec_per_epoch else None


def per_million_images(price: Optional[dict], config: Config, samples_per_sec: float) -> Optional[float]:
    hourly = per_hour(price, config)
    return hourly / (samples_per_sec * 3600) * 1e6 if hourly is not None and samples_per_sec > 0 else None


def dag_run_cost(rows: Sequence[dict], configs: Dict[str, Config], prices: Dict[str, dict]) -> Dict[str, dict]:
    """Per launcher: the machine time of its runs (hours of its price's unit), their cost and the
    harness's part of it; cost None where the launcher has no price."""
    found: Dict[str, dict] = {}
    for row in rows:
        config, launcher = configs.get(str(row.get("variant"))), str(row.get("launcher"))
        duration = _number(row.get("duration_s"))
        if config is None or duration is None:
            continue
        price = prices.get(launcher.removesuffix("-b"))
        count = units(price, config) if price else config.devices
        harness = max(0.0, duration - (_number(row.get("trainer_wall_s")) or duration))
        entry = found.setdefault(launcher, {"unit": price["unit"] if price else "device", "hours": 0.0,
                                            "harness_hours": 0.0, "cost": None, "harness_cost": None,
                                            "currency": price.get("currency", "") if price else ""})
        entry["hours"] += count * duration / 3600
        entry["harness_hours"] += count * harness / 3600
        if price:
            entry["cost"] = entry["hours"] * price["per_hour"]
            entry["harness_cost"] = entry["harness_hours"] * price["per_hour"]
    return found


def _number(value) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def cheapest(options: List[Projection], price: Optional[dict], wanted: float) -> Optional[dict]:
    """The size, measured or projected, that reaches ``wanted`` samples/s at the least cost an hour;
    ``sure``: its interval's low end reaches it too. None without a price or when none reaches it."""
    if not price:
        return None
    reaching = [p for p in options if p.samples_per_sec >= wanted]
    if not reaching:
        return None
    best = min(reaching, key=lambda p: (per_hour(price, p.config), -p.samples_per_sec))
    return {"projection": best, "per_hour": per_hour(price, best.config), "sure": best.low >= wanted,
            "per_million_images": per_million_images(price, best.config, best.samples_per_sec)}

"""The report's first screen: per variant and launcher pair, the speed ratio with its interval as
a picture (a forest plot: point, interval, the detectable gap and the target band around 100%), the
verdict as a short label, one line of why, and tags for the conditions that change how the number
may be read. The long verdict sentences stay below it (``tables.verdict_lines``)."""
import html
import math
from typing import Callable, List, NamedTuple

import pandas as pd

from mxbench.stats.outcomes import CANT_TELL, FASTER, SLOWER, WITHIN_BAND

# the verdicts' outcomes (stats.outcomes) as the five labels a reader scans for; only an equivalence
# test's "within the band" is green: a line that showed neither a difference nor equivalence is grey
LABELS = {SLOWER: SLOWER, FASTER: FASTER, WITHIN_BAND: WITHIN_BAND, CANT_TELL: CANT_TELL}
NOT_SETTLED = "not enough rounds"  # borderline, too few repeats, undecidable at this n
# Okabe-Ito colours (told apart with colour-blindness); each label also has its own marker shape
COLOURS = {SLOWER: "#D55E00", FASTER: "#0072B2", WITHIN_BAND: "#009E73", CANT_TELL: "#6B6B6B",
           NOT_SETTLED: "#6B6B6B"}


class AnswerRow(NamedTuple):
    variant: str
    pair: str  # "kubernetes / ssh": the launcher, then the one it is compared with
    ratio: float
    low: float
    high: float
    level: float
    detectable: float  # NaN: none at this n
    label: str
    why: str
    tags: List[str]


def answer_rows(ratios: pd.DataFrame, tags_for: Callable[[tuple], List[str]]) -> List[AnswerRow]:
    """One row per line of ``ratios`` (``metrics.launcher_ratios``); ``tags_for((launcher,
    reference))`` gives the tags of the conditions that bear on that pair; a line whose rounds
    were contended also carries "contended: rounds 2-4, replaced" (or "..., judged as measured")."""
    rows = []
    for row in ratios.to_dict("records"):
        outcome = row.get("outcome") if isinstance(row.get("outcome"), str) else ""
        rows.append(AnswerRow(
            str(row["variant"]), f"{row['launcher']} / {row['reference']}", number(row.get("ratio")),
            number(row.get("ci_low")), number(row.get("ci_high")), number(row.get("level"), 0.95),
            number(row.get("min_detectable")), LABELS.get(outcome, NOT_SETTLED), why(row, outcome),
            tags_for((row["launcher"], row["reference"])) + contended_tags(row)))
    return rows


def contended_tags(row: dict) -> List[str]:
    """The tag of a line some of whose rounds were contended (``metrics.contended_text``)."""
    said = text_of(row.get("contended_rounds"))
    return [f"contended: {said}"] if said else []


def number(value, default=math.nan) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def why(row: dict, outcome: str) -> str:
    """The verdict's reason in one line: what p and the interval said, and over how many runs."""
    p, alpha = number(row.get("p_value")), number(row.get("alpha"), 0.05)
    p_text = "p n/a" if math.isnan(p) else ("p < 0.001" if p < 0.001 else f"p = {p:.3f}")
    analysis = row.get("analysis") if isinstance(row.get("analysis"), str) else ""
    n = number(row.get("n"))
    runs = "" if math.isnan(n) else (f"{int(n)} rounds paired" if analysis.startswith("paired")
                                     else f"{int(n)} vs {int(number(row.get('n_reference'), 0))} runs unpaired")
    detectable = number(row.get("min_detectable"))
    adjusted = number(row.get("p_adjusted"))
    family = f" ({text_of(row.get('family'))}: adjusted p = {adjusted:.3f})" if not math.isnan(adjusted) else ""
    if outcome in (SLOWER, FASTER):
        reason = f"{p_text}{family} < α = {alpha:g} and the interval excludes 100%"
    elif outcome == "borderline" and p < alpha and not math.isnan(adjusted) and adjusted >= alpha:
        reason = f"{p_text} < α alone, not across the family{family}: more rounds would settle it"
    elif outcome == WITHIN_BAND:
        reason = f"{p_text}; {band_text(row, 'inside')}"
    elif outcome == CANT_TELL:
        reason = f"{p_text}; " + (band_text(row, "runs past") if not math.isnan(number(row.get("target_gap")))
                                  else "no target band to show equivalence by")
        reason += (f"; a gap of {detectable:.1%} or more would have shown" if not math.isnan(detectable)
                   else "; the runs show no spread to judge a gap by")
        rounds = number(row.get("rounds_to_resolve"))
        if not math.isnan(rounds) and not math.isnan(number(row.get("target_gap"))):
            reason += f"; about {int(rounds)} {'rounds' if analysis.startswith('paired') else 'repeats a side'} " \
                      "would resolve it"
    elif outcome == "borderline":
        reason = f"{p_text} < α but the interval includes 100%: more rounds would settle it"
    else:
        reason = f"{p_text}: no result at this number of runs could reach α = {alpha:g}"
    return f"{reason} ({runs})" if runs else reason


def band_text(row: dict, where: str) -> str:
    """'the 90% interval [97.1%, 104.0%] inside the ±15% band' (TOST at α)."""
    alpha, gap = number(row.get("alpha"), 0.05), number(row.get("target_gap"))
    return (f"the {1 - 2 * alpha:.0%} interval [{percent(number(row.get('tost_low')))}, "
            f"{percent(number(row.get('tost_high')))}] {where} the ±{gap:.0%} band")


def text_of(value) -> str:
    return value if isinstance(value, str) else ""


def answer_table(rows: List[AnswerRow]) -> pd.DataFrame:
    """The forest plot's text equivalent, and the answer in Markdown."""
    return pd.DataFrame([{
        "variant": r.variant, "launcher / reference": r.pair,
        "speed ratio": f"{percent(r.ratio)} [{percent(r.low)}, {percent(r.high)}]",
        "verdict": r.label, "why": r.why, "read with": ", ".join(r.tags)} for r in rows])


def percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


# --- the forest plot, as SVG: sharp at any size, and its rows are elements a test can count --------

WIDTH, LEFT, RIGHT, ROW, TOP, BOTTOM = 820, 240, 150, 30, 34, 40


def forest_svg(rows: List[AnswerRow], target_gap: float) -> str:
    """One row per pair: the ratio (a marker whose shape and colour say the verdict), its interval
    (a line), the smallest gap the rule would have detected (ticks) and the target band (shaded)."""
    lo, hi = axis_limits(rows, target_gap)
    span = WIDTH - LEFT - RIGHT
    height = TOP + ROW * len(rows) + BOTTOM

    def x(value: float) -> float:
        return LEFT + span * (min(max(value, lo), hi) - lo) / (hi - lo)

    title = "Launcher speed ratios with their 95% intervals"
    desc = "; ".join(f"{r.variant}, {r.pair}: {percent(r.ratio)}, interval {percent(r.low)} to {percent(r.high)}, "
                     f"{r.label}" for r in rows)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='forest' role='img' width='{WIDTH}' height='{height}' "
             f"viewBox='0 0 {WIDTH} {height}' aria-labelledby='forest-title forest-desc' "
             "font-family='sans-serif' font-size='12'>",
             f"<title id='forest-title'>{html.escape(title)}</title><desc id='forest-desc'>{html.escape(desc)}</desc>"]
    if target_gap > 0:
        band_lo, band_hi = x(1 - target_gap), x(1 + target_gap)
        parts.append(f"<rect x='{band_lo:.1f}' y='{TOP - 6}' width='{band_hi - band_lo:.1f}' "
                     f"height='{ROW * len(rows) + 6}' fill='#E8EEF7'/>")
        parts.append(f"<text x='{band_hi:.1f}' y='{TOP - 10}' text-anchor='end' fill='#333'>"
                     f"target band ±{target_gap:.0%}</text>")
    parts.append(f"<line x1='{x(1):.1f}' y1='{TOP - 6}' x2='{x(1):.1f}' y2='{TOP + ROW * len(rows)}' "
                 "stroke='#333' stroke-dasharray='4 3'/>")
    for i, r in enumerate(rows):
        y = TOP + ROW * i + ROW / 2
        colour = COLOURS[r.label]
        parts.append(f"<g class='forest-row' data-variant='{html.escape(r.variant, quote=True)}' "
                     f"data-pair='{html.escape(r.pair, quote=True)}' "
                     f"data-verdict='{html.escape(r.label, quote=True)}'>")
        parts.append(f"<text x='{LEFT - 8}' y='{y + 4:.1f}' text-anchor='end' fill='#222'>"
                     f"{html.escape(r.variant)} · {html.escape(r.pair)}</text>")
        if not math.isnan(r.detectable):  # the detectable gap: ticks at 100% ± it
            for edge in (1 - r.detectable, 1 + r.detectable):
                parts.append(f"<line x1='{x(edge):.1f}' y1='{y - 7:.1f}' x2='{x(edge):.1f}' y2='{y + 7:.1f}' "
                             "stroke='#888' stroke-width='2'/>")
        if not (math.isnan(r.low) or math.isnan(r.high)):
            parts.append(f"<line x1='{x(r.low):.1f}' y1='{y:.1f}' x2='{x(r.high):.1f}' y2='{y:.1f}' "
                         f"stroke='{colour}' stroke-width='2.5'/>")
        if not math.isnan(r.ratio):
            parts.append(marker(r.label, x(r.ratio), y, colour))
        parts.append(f"<text x='{WIDTH - RIGHT + 8}' y='{y + 4:.1f}' fill='{colour}' font-weight='bold'>"
                     f"{html.escape(r.label)}</text></g>")
    axis_y = TOP + ROW * len(rows) + 4
    parts.append(f"<line x1='{LEFT}' y1='{axis_y}' x2='{WIDTH - RIGHT}' y2='{axis_y}' stroke='#333'/>")
    for tick in ticks(lo, hi):
        parts.append(f"<line x1='{x(tick):.1f}' y1='{axis_y}' x2='{x(tick):.1f}' y2='{axis_y + 4}' stroke='#333'/>"
                     f"<text x='{x(tick):.1f}' y='{axis_y + 16}' text-anchor='middle' fill='#222'>{tick:.0%}</text>")
    parts.append(f"<text x='{LEFT + span / 2:.0f}' y='{axis_y + 32}' text-anchor='middle' fill='#222'>"
                 "speed as a share of the reference's · line: 95% interval · grey ticks: smallest detectable gap"
                 "</text></svg>")
    return "".join(parts)


def marker(label: str, x: float, y: float, colour: str) -> str:
    """A shape per verdict, so the plot reads without colour: ◀ slower, ▶ faster, ● within the band,
    □ can't tell, ○ not enough rounds."""
    if label in (SLOWER, FASTER):
        tip, back = (x - 6, x + 6) if label == SLOWER else (x + 6, x - 6)
        return f"<polygon points='{back:.1f},{y - 6:.1f} {back:.1f},{y + 6:.1f} {tip:.1f},{y:.1f}' fill='{colour}'/>"
    if label == CANT_TELL:
        return (f"<rect x='{x - 5:.1f}' y='{y - 5:.1f}' width='10' height='10' fill='white' stroke='{colour}' "
                "stroke-width='2'/>")
    fill = colour if label == WITHIN_BAND else "white"
    return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='5.5' fill='{fill}' stroke='{colour}' stroke-width='2'/>"


def axis_limits(rows: List[AnswerRow], target_gap: float) -> tuple:
    """The ratio axis: every interval, the target band and the detectable gaps, with a margin; at most
    25%..250% (an interval wider than that is cut at the edge)."""
    values = [1 - target_gap, 1 + target_gap, 0.9, 1.1]
    for r in rows:
        values += [v for v in (r.low, r.high, r.ratio) if not math.isnan(v)]
        if not math.isnan(r.detectable):
            values += [1 - r.detectable, 1 + r.detectable]
    lo, hi = max(min(values), 0.25), min(max(values), 2.5)
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def ticks(lo: float, hi: float) -> List[float]:
    """Ticks every 5, 10, 25 or 50 percentage points, whichever gives 4 to 10."""
    for step in (0.05, 0.1, 0.25, 0.5):
        first = math.ceil(lo / step) * step
        marks = [round(first + i * step, 4) for i in range(int((hi - first) / step) + 1)]
        if len(marks) <= 10:
            return marks
    return [1.0]

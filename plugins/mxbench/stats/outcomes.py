"""The verdict outcomes, in one place: the words every verdict line, table, answer row, CLI and
since-last line uses (``verdict`` sets them; the report, the A/A calibration and the since-last
block read them).

A line that is not called different says only what it measured: "within the band" when an
equivalence test shows the ratio inside the target band (``verdict``: TOST), else "can't tell",
with the gap it could have detected and the rounds that would resolve it. Absence of evidence
is never shown as equivalence.
"""
SLOWER = "slower"
FASTER = "faster"
CALLED = (SLOWER, FASTER)  # the outcomes that call a difference
WITHIN_BAND = "within the band"  # equivalent: the (1 - 2α) interval lies inside the target band
CANT_TELL = "can't tell"  # neither a difference nor equivalence shown
BORDERLINE = "borderline"  # p < α but the interval includes 100% (or not across the family)
TOO_FEW = "too few repeats"
UNDECIDABLE = "undecidable at this n"

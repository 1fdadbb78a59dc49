"""Regressions over builds and time: the baseline rule with confirmation and false-discovery control,
alert triage, bisection."""

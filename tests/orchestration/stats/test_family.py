"""Adjusted p-values for a family of verdicts (``stats.family``): the textbook adjustments."""
import pytest

from mxbench.regression import regression_rule
from mxbench.stats.family import benjamini_hochberg, holm


def test_benjamini_hochberg_matches_the_textbook_adjustment():
    p = [0.01, 0.04, 0.03, 0.20]
    # sorted 0.01, 0.03, 0.04, 0.20: p * m / rank = 0.04, 0.06, 0.0533, 0.20; then monotone from the top
    assert benjamini_hochberg(p) == pytest.approx([0.04, 0.0533333, 0.0533333, 0.20])
    assert benjamini_hochberg([]) == []
    assert regression_rule.benjamini_hochberg is benjamini_hochberg  # the regression check uses this one


def test_holm_matches_the_textbook_adjustment():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04: p * (m - rank + 1) = 0.02, 0.03, 0.06, 0.04; then monotone from the bottom
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6]) and holm([0.02]) == [0.02] and holm([]) == []


def test_the_detectable_gap_is_computed_where_the_family_calls_a_line_whatever_the_others_show():
    from mxbench.stats.family import detection_alpha

    # Holm calls a line with p below alpha / m whatever the other lines' p: the level its detectable gap is printed at
    assert detection_alpha(0.05, 3) == pytest.approx(0.05 / 3) and detection_alpha(0.05, 1) == 0.05
    p = [0.05 / 3 - 1e-9, 0.9, 0.9]
    assert holm(p)[0] < 0.05 and benjamini_hochberg(p)[0] < 0.05
    with pytest.raises(ValueError, match="unknown family method 'bonferroni'"):
        detection_alpha(0.05, 3, "bonferroni")

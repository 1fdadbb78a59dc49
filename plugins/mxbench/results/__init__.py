"""Reading the runs: MXNet logs parsed, per-run metrics and launcher ratios, A/A calibration, time to
accuracy."""

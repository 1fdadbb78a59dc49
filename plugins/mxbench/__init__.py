"""mxbench orchestration side."""

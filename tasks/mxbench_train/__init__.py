"""mxbench's training side: what runs in the training image or on GPU hosts.

Only ``train``, ``data`` and the modules they import need mxnet; ``roles``,
``launcher``, ``events`` and ``telemetry`` are stdlib-only so that the
orchestration environment (Airflow, no mxnet) can import them.
"""

"""mxbench's training side: what runs in the training image or on GPU hosts.

Only ``train`` (and ``resnet``, mxnet), ``cifar10`` and ``synthetic`` (numpy) need more
than the standard library. The orchestration environment (Airflow, no mxnet, no numpy
needed) imports these stdlib-only modules, so they must stay that way:
``errors``, ``events``, ``role_plan``, ``plan_runner``, ``localhost``, ``telemetry``,
``role_log``, ``pod_outputs``, ``host_build`` (with ``host_workdir`` and ``host_folders``) and ``data_sources``.
``download``, ``probe``, ``supervise``, ``recordio_check``, ``elf`` and ``kvstore_scheduler`` (ctypes on
libmxnet, no mxnet package) are stdlib-only too.
"""

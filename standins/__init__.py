"""Stand-ins for infrastructure this machine cannot run, for the demo, the tests and the benchmarks:
``sshd`` (real sshd processes on loopback addresses as remote hosts), ``kube`` (a Kubernetes API
server whose pods are local processes), ``postgres`` (a throwaway PostgreSQL server),
``airflow_stack`` (a real Airflow api-server, dag-processor and scheduler, with its env, pools, REST
calls and stop: the one the demo, the tests and the benchmarks start), ``celery_stack`` (the same on
the CeleryExecutor, with ``s3_server``, moto's S3 server, and ``worker_hostname``)."""

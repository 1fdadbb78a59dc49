"""Stand-ins for infrastructure this machine cannot run, for the demo, the tests and the benchmarks:
``sshd`` (real sshd processes on loopback addresses as remote hosts), ``kube`` (a Kubernetes API
server whose pods are local processes) and ``postgres`` (a throwaway PostgreSQL server)."""

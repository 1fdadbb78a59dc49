"""A loopback Kubernetes API server stand-in that is also its own scheduler and kubelet.

It lets the Kubernetes launcher, Airflow's KubernetesPodOperator and the ``kubernetes`` Python
client run unmodified on a machine without a cluster: it speaks the real Kubernetes HTTP API
(JSON, plain HTTP on 127.0.0.1, any bearer token accepted) and runs every pod's container as an
ordinary local process, in the pod's network namespace.

What is real
  * The wire protocol of the endpoints served: ``/version``, ``/api``, ``/api/v1``, ``/apis``;
    pods (create, get, list, patch, delete, delete collection, ``/log``), events, nodes. Errors are
    ``Status`` objects with the real reasons and codes (404 NotFound, 409 AlreadyExists,
    422 Invalid, 400 BadRequest, 405 MethodNotAllowed).
  * Label selectors (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``) and
    field selectors (pods: metadata.name/namespace, status.phase, spec.nodeName; events:
    involvedObject.*, reason, type) with ``=``, ``==`` and ``!=``.
  * Pod manifests are validated with ``kubernetes_validate`` (strict schema of Kubernetes 1.34)
    plus the server-side checks a schema cannot express (quantities, extended resources, DNS-1123
    names, label syntax). Every received manifest is appended to ``<root>/manifests.jsonl``.
  * Pod life cycle: Pending (Unschedulable, or ContainerCreating) -> Running -> Succeeded/Failed
    with the container states, exit codes (128+signal for a signal), conditions, events
    (Scheduled, FailedScheduling, Pulled, Created, Started, Killing, DeadlineExceeded) and a
    resourceVersion that grows on every change. ``activeDeadlineSeconds`` and graceful deletion
    (SIGTERM to the container's process group, SIGKILL after the grace period) behave like the
    kubelet. The log is the process's real stdout+stderr, line by line (a line longer than 16 KiB
    in pieces, as the CRI stores it; each piece counts as a line for ``tailLines`` and gets its
    own timestamp), with the time each line arrived (``timestamps=true`` prints
    it as the kubelet does, 9 fixed decimals).
  * Scheduling honours ``spec.nodeSelector``, ``spec.nodeName`` and ``nvidia.com/gpu`` (any
    extended resource asked for as a limit is counted against the node's allocatable, which has
    only ``nvidia.com/gpu``). Among the nodes that fit, the one with fewest pods wins (spreading).
  * The pod network (``network``), as a cluster with flannel's vxlan backend has it: each node is a
    network namespace (``standins.netns``: the nodes joined by a link shaped with ``tbf``, to
    ``--link-rate``), each pod a namespace of its own with a veth into its node's bridge and an
    address of its node's pod subnet (``spec.podCIDR``), node-to-node pod traffic through a VXLAN
    device per node; ``hostNetwork: true`` pods run in their node's namespace, with its address.
    The nodes carry flannel's annotations, and ``standin.mxbench/pod-network`` says which pod network
    the stand-in made. Where namespaces cannot be made (not root, no ``ip``/``nsenter``), or with
    ``--pod-network none``, every pod runs on the machine's own stack with a loopback address of
    its own (127.<k>.x.y, <k> at random; nodes 127.<k>.0.<i>), and the annotation and the log say
    why. ``<root>/network.json`` records what was made. ``$(VAR)`` expansion and
    ``valueFrom.fieldRef`` / ``resourceFieldRef`` follow Kubernetes.
  * Node heartbeats (``heartbeats``): each node's kubelet posts its status over the node's own
    link every 2 s; a node not heard from for ``--node-grace`` seconds (default 40, a control
    plane's node-monitor-grace-period) goes ``Ready: Unknown`` (NodeStatusUnknown) with the
    ``node.kubernetes.io/unreachable`` taint, and Ready again once it is heard from.

What is simplified (and how it shows)
  * Every node is this whole machine: capacity cpu = os.cpu_count(), memory = MemTotal, and
    ``status.nodeInfo.machineID`` is this machine's id on every node, so a client can tell.
  * No images: ``image`` is recorded, never pulled. A container needs ``command`` (``args`` alone
    is refused with 422: the stand-in has no image entrypoint). The process runs with the
    stand-in's own environment (PATH, venvs ...) plus the container's ``env``, HOSTNAME = the pod
    name, stdin /dev/null, its own session/process group, and as working directory the
    translated ``workingDir`` or else a fresh per-pod folder ``<root>/pods/<ns>_<name>_<uid8>/workdir``.
  * An ``image`` that is an absolute path to an existing local folder (a venv, in tests) stands for
    that image's programs, nothing more: ``<folder>/bin`` goes first on the process's PATH (before the
    container's ``env``, which may still set PATH), so a command ``python ...`` runs that folder's
    python. The filesystem, libraries and everything else stay this machine's.
  * One container per pod; init, ephemeral and sidecar containers are refused with 422, so are
    ``restartPolicy`` other than Never (the default, Always, included: the stand-in does not
    restart containers), ``envFrom`` and env ``valueFrom`` other than fieldRef/resourceFieldRef.
  * No mounts. Volumes: ``emptyDir`` is a fresh folder ``<pod folder>/volumes/<volume name>``
    (deleted with the pod, as the kubelet does); ``emptyDir`` with ``medium: Memory`` mounted at
    ``/dev/shm`` is simply the host's /dev/shm; ``hostPath`` is that path. Any other volume type
    (PVC, configMap, secret, ...) is refused with 422. Since the process cannot see mounts, the
    stand-in TRANSLATES PATHS: each argv element (command + args), env value and ``workingDir``
    that equals a volumeMount's ``mountPath`` or starts with ``mountPath + "/"`` is rewritten to
    the folder standing for that volume (longest mountPath first; ``subPath`` appended). Only whole
    values are translated: ``--out=/work/out`` is left alone, ``/work/out/x`` becomes
    ``<folder>/x``; paths the program builds itself are not seen. ``/dev/shm`` is never rewritten.
  * ``requiredDuringScheduling`` pod (anti-)affinity, node affinity, taints and tolerations are
    accepted in manifests and ignored by the scheduler. No preemption, no QoS enforcement
    (limits are not enforced on the process), no ``watch``, no exec/attach/port-forward.
  * Processes that leave their process group (setsid/daemonise) escape the container clean-up,
    unless the pod has a network namespace of its own: removing it kills what still runs in it.
  * A node's link down does not stop its kubelet from acting on what the API server says (a
    deletion still kills the pod's processes): the kubelet runs in the machine's own namespace.
  * Events and logs live in memory for the life of the stand-in (logs: while the pod exists).

For tests, each started container's pid is exposed in the annotation ``standin.mxbench/pid``
and appended to ``<root>/pids.log``.

Use: ``python -m standins.kube start --root DIR [--nodes N] [--gpus-per-node K]
[--port P] [--no-validate] [--pod-network vxlan|none] [--link-rate 1gbit] [--node-grace 40]``
(detaches; writes DIR/kubeconfig, DIR/port, DIR/standin.pid and
prints the kubeconfig path), ``serve`` (same, foreground), ``stop --root DIR``, ``check --root DIR``.
From Python: ``with start(root) as standin: ... standin.kubeconfig ...``. Standard library only,
except ``kubernetes_validate`` when validation is on (and ``mxbench_train.localhost``, stdlib only).

Modules: ``api`` (Status errors, quantities, patches, selectors), ``validation`` (what the API
server checks and defaults in a pod), ``objects`` (the object store: pods, events, status),
``scheduler`` (the nodes and the control loop), ``kubelet`` (containers as processes), ``heartbeats``
(the nodes' status over their links), ``network``
(the pod network: namespaces and the VXLAN overlay, or the machine's own stack), ``cluster``
(the three wired together), ``server`` (the HTTP API), ``lifecycle`` (serve, start, stop),
``__main__`` (the CLI).
"""
from .api import GIT_VERSION, PID_ANNOTATION
from .lifecycle import StandIn, serve, spawn, start

__all__ = ["GIT_VERSION", "PID_ANNOTATION", "StandIn", "serve", "spawn", "start"]

"""The DAG's run task: one mapped instance per run, for every launcher.

Why one operator for every launcher: launchers that share machines (ssh and Kubernetes on the
same GPU boxes, as in the seed's k8s-vs-ssh study) must share one mapped task in one pool, so
that their runs never overlap and their rounds run in counterbalanced order; Airflow takes a mapped task's pool
from ``partial()`` only. A Kubernetes run's role pods are made with a KubernetesPodOperator that the
task builds for that run only (``pod_operator``): its connection and hook, its pod building
(``build_pod_request_obj``: pod template file, labels, namespace, mutation hook) and its ``PodManager``
for start-up; ``on_kill`` deletes the run's pods. A local or ssh run goes through its launcher.
The task is a plain operator that builds the KubernetesPodOperator, not a subclass of it: every task
process parses the DAG file before its task runs (so does the dag-processor), and the Kubernetes
provider and client would add about a second to each local and ssh run.
"""
from __future__ import annotations

from airflow.sdk import BaseOperator

TASK_TIMEOUT_GRACE_MIN = 5  # past the launcher's own deadline: teardown, then Airflow's backstop


def task_timeout(params: dict):
    """A run task's Airflow ``execution_timeout``: ``run_timeout_minutes`` plus a grace."""
    from datetime import timedelta

    return timedelta(minutes=int(params["run_timeout_minutes"]) + TASK_TIMEOUT_GRACE_MIN)


class RunVariantOperator(BaseOperator):
    """Run one run of the matrix (``run``: a dict from ``expand_variants``) under its launcher.
    Never deferrable: a deferred task hands its pool slot back, and a run's roles must all run at
    once while nothing else runs on those machines."""

    template_fields = ()  # ``run`` comes from XCom as data; nothing here is a template
    ui_color = "#d6e9f8"

    def __init__(self, *, run: dict, **kwargs):
        super().__init__(**kwargs)
        self.run = run
        self._run_pods = None  # a Kubernetes run's pods, once made: on_kill deletes them
        self._killed = False  # on_kill ran: no pod starts after it, and the task fails

    def pre_execute(self, context):
        # the task timeout follows the DAG run's run_timeout_minutes, known only now
        self.execution_timeout = task_timeout(context["params"])
        print(f"mxbench: task timeout {self.execution_timeout} (run_timeout_minutes + grace)")
        return super().pre_execute(context)

    def execute(self, context):
        from mxbench import artifacts

        ti = context["ti"]
        # who ran this try: with several workers, a lost one's run is retried on another
        task = {"worker": getattr(ti, "hostname", None), "try_number": getattr(ti, "try_number", None)}
        with artifacts.run_folder(context["dag_run"].dag_id, context["run_id"], self.run["key"], extra=task) as space:
            self.run_in(space.folder, context, task, aside=space.aside)

    def run_in(self, dag_folder, context, task: dict, aside=None) -> None:
        """Hand the run over to its stage (``run_stage.run_task``) with what only Airflow knows: the
        launchers (the connections, the pod operator), the store and the stop rule's baseline."""
        from airflow.sdk.exceptions import AirflowException, AirflowSkipException

        from mxbench import artifacts, config
        from mxbench.airflow_glue import connections
        from mxbench.stages import run_stage

        params = context["params"]
        store = artifacts.Store()

        def launcher_for(name):
            if name == "kubernetes":
                return self.kubernetes_launcher(context)
            return connections.launcher_for(name, params)

        def local_data(data, launcher):  # the published data set: pods read it from their data volume
            root = (connections.kubernetes_settings(params).local_data_root if launcher == "kubernetes"
                    else config.data_dir())
            return artifacts.local_data(data, root, store)

        try:
            result = run_stage.run_task(
                self.run, dag_folder, deadline_s=60 * params["run_timeout_minutes"], launcher_for=launcher_for,
                task=task, quiet_wait_s=params.get("quiet_wait_s") or 0, aside=aside,
                skip_reason=lambda run: self.skip_reason(run, dag_folder, context, store),
                local_data=None if store.is_home else local_data)
        except run_stage.RoundSkipped as skipped:
            raise AirflowSkipException(str(skipped)) from None
        if self._killed:  # SIGTERM arrived outside the launcher's own handler: never report success
            raise AirflowException(f"run {self.run['key']}: the task was killed; its pods were deleted")
        print(f"mxbench: run {self.run['key']}: {result['status']} in {result['duration_s']:.1f} s")

    @staticmethod
    def skip_reason(run: dict, dag_folder, context, store):
        """Why optional round ``run`` need not run (``stop_rule``), or None. Only optional rounds
        pay for parsing the first rounds' logs (pandas). Not knowing means running it."""
        from mxbench import artifacts
        from mxbench.stages import stop_rule

        fetch = None
        if not store.is_home:  # the first rounds ran on any worker: their units are in the store
            name = artifacts.dag_run_name(context["dag_run"].dag_id, context["run_id"])

            def fetch(key, into):
                artifacts.Workspace(store, name, into).fetch_unit(key)
        def baseline_for(variant, launcher, machine, setup):  # a confirmation round's: as check_regression's
            from datetime import datetime, timezone

            from mxbench import store
            from mxbench.airflow_glue import connections
            from mxbench.regression import triage

            params, dag_id, run_id = context["params"], context["dag_run"].dag_id, context["run_id"]
            url = connections.results_url(params)
            at = store.dag_run_time(url, dag_id, run_id) or datetime.now(timezone.utc)
            since = triage.baseline_start(store.series_alerts(url, variant, launcher, machine, dag_id), at)
            return store.baseline(url, variant, launcher, machine, before=(dag_id, run_id),
                                  runs=params["baseline_runs"], since=since, setup=setup)

        try:
            return stop_rule.skip_reason(run, dag_folder, fetch_unit=fetch, baseline_for=baseline_for)
        except Exception as exc:  # a store that failed to answer: the round runs, as if unsettled
            print(f"mxbench: run {run['key']}: could not tell whether the round is needed, so it runs: "
                  f"{type(exc).__name__}: {exc}")
            return None

    def kubernetes_launcher(self, context):
        """The Kubernetes launcher with the pod operator's client, PodManager and base pod."""
        from mxbench.airflow_glue import connections
        from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
        from mxbench_train.errors import MxbenchError

        settings = connections.kubernetes_settings(context["params"])
        pods = self.pod_operator(settings)
        try:
            base = pods.client.api_client.sanitize_for_serialization(pods.build_pod_request_obj(context))
        except Exception as exc:  # a kubeconfig that does not load, a pod template file that does not parse
            raise MxbenchError(f"kubernetes connection {settings.conn_id!r}: building the pods failed: "
                               f"{type(exc).__name__}: {exc}") from None
        return KubernetesLauncher(settings, pods.client, pods.pod_manager, base_pod=base,
                                  on_pods=lambda run_pods: setattr(self, "_run_pods", run_pods),
                                  should_stop=lambda: self._killed)

    def pod_operator(self, settings):
        """The KubernetesPodOperator whose pod building, client and PodManager a Kubernetes run's role
        pods use (``settings``: the run's ``PodSettings``). Never executed itself, and not deferrable
        whatever Airflow's default: the run task keeps its pool slot."""
        from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
        from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

        from mxbench.launchers.kubernetes.pods import pod_template

        # mxbench's pod settings over the template file; the operator adds Airflow's labels
        return KubernetesPodOperator(
            task_id=self.task_id, kubernetes_conn_id=settings.conn_id, image=settings.image,
            namespace=settings.namespace, pod_template_file=settings.pod_template_file,
            full_pod_spec=PodGenerator.deserialize_model_dict(pod_template(settings)), deferrable=False)

    def on_kill(self) -> None:
        """Delete every pod of the current run, and start no more; ``execute`` then fails the task.
        (While the roles run, the launcher's own SIGTERM handler stops them first.)"""
        self._killed = True
        pods = self._run_pods
        if pods is not None:
            try:
                pods.delete_all(wait_s=0)  # no waiting: Airflow SIGKILLs the task 5 s after SIGTERM
            except Exception as exc:
                self.log.error("could not delete the pods of run %s: %s", self.run.get("key"), exc)


"""An Airflow notifier for the tests: appends one line per call to a file."""
from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    template_fields = ()

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def render_template_fields(self, context, jinja_env=None):
        # nothing to render; and under dag.test() a DAG callback's context holds the serialized DAG,
        # which has no template environment (the dag-processor runs callbacks with the real one)
        pass

    def notify(self, context):
        with open(self.path, "a") as out:
            out.write(f"{context['dag'].dag_id} {context['dag_run'].run_id} {context['dag_run'].state}\n")

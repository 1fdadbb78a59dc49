"""An Airflow notifier for the tests: appends one line per call to a file."""
from airflow.sdk import BaseNotifier


class RecordingNotifier(BaseNotifier):
    template_fields = ()

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def notify(self, context):
        with open(self.path, "a") as out:
            out.write(f"{context['dag'].dag_id} {context['dag_run'].run_id} {context['dag_run'].state}\n")

"""Who hears of a failed DAG run: Airflow notifiers named in configuration, not code.

``MXBENCH_NOTIFIERS`` (read where the DAG is parsed) is a JSON list of
``{"notifier": "package.module.Class", "kwargs": {...}}``, each an Airflow ``BaseNotifier``
(e.g. ``airflow.providers.smtp.notifications.smtp.SmtpNotifier`` or the Slack provider's
``SlackNotifier``, with its connection id in kwargs: secrets stay in Airflow connections). The
regression DAG calls them when a DAG run fails, a regression included.
"""
import importlib
import os

from mxbench_train import json_input

NOTIFIERS_ENV = "MXBENCH_NOTIFIERS"


def failure_notifiers(environ=os.environ) -> list:
    raw = environ.get(NOTIFIERS_ENV)
    if not raw:
        return []
    try:
        specs = json_input.loads(raw)
        if not isinstance(specs, list) or not all(isinstance(s, dict) and isinstance(s.get("notifier"), str)
                                                   and isinstance(s.get("kwargs", {}), dict) for s in specs):
            raise ValueError
    except ValueError:
        raise ValueError(f"{NOTIFIERS_ENV} must be a JSON list of "
                         f"{{\"notifier\": \"module.Class\", \"kwargs\": {{...}}}}, got {raw[:200]!r}") from None
    from airflow.sdk import BaseNotifier

    notifiers = []
    for spec in specs:
        module, _, name = spec["notifier"].rpartition(".")
        try:
            notifier = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"{NOTIFIERS_ENV}: cannot import {spec['notifier']!r}: {exc}") from None
        if not (isinstance(notifier, type) and issubclass(notifier, BaseNotifier)):
            raise ValueError(f"{NOTIFIERS_ENV}: {spec['notifier']!r} is not an Airflow BaseNotifier")
        notifiers.append(notifier(**spec.get("kwargs", {})))
    return notifiers

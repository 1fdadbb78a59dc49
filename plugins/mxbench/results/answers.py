"""What hosts answer, as JSON Schemas, checked where each answer comes in: the training-env probe
(the SSH launcher's ``target()`` and run set-up), the work folder's answer, a quiet probe's reading
(``hosts.quiet_gate``) and the machine facts a trainer reports in its ``run_start`` event (the parse
stage). A host is not trusted: a bad answer fails that host's run, or that host's check, with its
cause, never the DAG run.

Each schema is strict about the types of the fields the orchestration reads and says nothing of
the others (``additionalProperties`` stays allowed): a newer trainer may send more. The problem is
told by field and rule, never by quoting the value (a host's word, of any size). Pure (jsonschema).
"""
from typing import Any, Dict, Optional

NUMBER = {"type": "number"}
TEXT_OR_NULL = {"type": ["string", "null"]}

_FACTS: Dict[str, Any] = {
    "cpu_model": TEXT_OR_NULL,
    "cpu_count": {"type": ["integer", "null"]},
    "gpu": {"type": ["object", "null"], "properties": {
        "available": {"type": "boolean"},
        "gpus": {"type": "array", "items": {"type": "object", "properties": {"name": TEXT_OR_NULL}}},
        "driver": TEXT_OR_NULL,
        "cuda": TEXT_OR_NULL}}}
MACHINE_FACTS = {"type": "object", "properties": _FACTS}

# a trainer's run_start environment: the machine facts, and the versions the store keeps
RUN_ENVIRONMENT = {"type": "object", "properties": {
    **_FACTS, "mxnet_version": TEXT_OR_NULL, "mxnet_commit": TEXT_OR_NULL}}

# the interpreter's version (commands.version_command): [major, minor]
VERSION = {"type": "array", "minItems": 2, "items": {"type": "integer"}}

# python -m mxbench_train probe (mxbench_train.probe); ``port`` only where an address was asked
_PROBED: Dict[str, Any] = {"cores": {"type": "integer", "minimum": 1}, "gpus": {"type": "integer", "minimum": 0},
                           "machine": TEXT_OR_NULL, "network": TEXT_OR_NULL}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
PROBE = {"type": "object", "required": ["cores", "gpus"],
         "properties": {**_PROBED, "port": {"anyOf": [{"type": "null"}, PORT]}}}
PROBE_WITH_PORT = {"type": "object", "required": ["cores", "gpus", "port"], "properties": {**_PROBED, "port": PORT}}

# python -m mxbench_train.host_workdir: the folders, and the build's venv where one was asked for
WORK_FOLDER = {"type": "object", "required": ["workdir", "run_dir"], "properties": {
    "workdir": {"type": "string", "minLength": 1},
    "run_dir": {"type": "string", "minLength": 1},
    "build": {"type": "object", "properties": {"python": {"type": "string"}, "seconds": NUMBER}}}}

# the shared data folder's checksums (commands.sha256_command): file name -> hex digest
CHECKSUMS = {"type": "object", "additionalProperties": {"type": "string"}}

# python -m mxbench_train quiet-probe (mxbench_train.quiet_probe.sample)
QUIET_READING = {"type": "object", "properties": {
    "foreign_cores": {"type": ["number", "null"]},
    "steal": {"type": ["number", "null"]},
    "foreign_top": {"type": "array", "items": {"type": "object", "properties": {
        "pid": {"type": ["integer", "null"]}, "name": TEXT_OR_NULL, "cores": NUMBER}}},
    "unreadable": {"type": "array", "items": {"type": "string"}},
    "machine": {"anyOf": [{"type": "null"}, MACHINE_FACTS]}}}

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number", type(None): "null"}


def problem(schema: dict, answer) -> Optional[str]:
    """What is wrong with ``answer`` by ``schema`` (its field and the rule it breaks), or None."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(answer))
    if error is None:
        return None
    where = ".".join(map(str, error.absolute_path)) or "the answer"
    if error.validator == "type":
        expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f"{where} is {_JSON_TYPES.get(type(error.instance), 'something else')}, not {' or '.join(expected)}"
    if error.validator == "required":
        return f"{where} lacks {error.message.split(' is a required property')[0]}"
    if error.validator == "anyOf":
        return f"{where} is {_JSON_TYPES.get(type(error.instance), 'something else')}, in none of the forms it may take"
    return f"{where} breaks the rule {error.validator}: {error.validator_value}"

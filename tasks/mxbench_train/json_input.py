"""JSON from outside (a host, a pod, a trigger user, the environment) read so that every way it
can be wrong is a ValueError (stdlib only): json.loads raises RecursionError for nesting deeper than
the interpreter's recursion limit, which callers that catch ValueError would let through as a
traceback."""
import json


def loads(text):
    """``json.loads(text)``; nesting too deep to read is a ValueError like any other malformed JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None

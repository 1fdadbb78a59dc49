"""What the orchestration side may know of a training data source, without numpy (stdlib only).

How a source may be written down (``redact``: no credentials), the layout of the CIFAR-10
python archive that ``cifar10`` and ``synthetic`` read and write, and the version of
mxbench's synthetic data, which names the caches made from it. Cheap to import: ``host_build``
imports it on every reuse.
"""
import re
import urllib.parse

SYNTHETIC_VERSION = 2  # bump when synthetic.py's images change, so that cached copies are made anew
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"

SECRET_QUERY = re.compile(r"token|signature|sig|secret|password|passwd|key|credential|auth|x-amz-", re.I)


def redact(source):
    """A source as it may be written down: no user or password from a URL, and no value of a
    query parameter that looks like a credential (a pre-signed URL's signature, a token)."""
    parts = urllib.parse.urlsplit(str(source))
    if parts.scheme not in ("http", "https", "file"):
        return str(source)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    if parts.query:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(query=urllib.parse.urlencode(
            [(k, "REDACTED" if SECRET_QUERY.search(k) else v) for k, v in query], safe="/:"))
    return urllib.parse.urlunsplit(parts)


def batch_dir(path):
    """Where a CIFAR-10 folder keeps its batches: ``path/cifar-10-batches-py`` (the archive's layout)
    when there is one, else ``path`` itself (both pathlib paths)."""
    return path / FOLDER if (path / FOLDER).is_dir() else path

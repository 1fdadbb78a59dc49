"""What the orchestration side may know of a training data source, without numpy (stdlib only).

The layout of the CIFAR-10 python archive that ``cifar10`` and ``synthetic`` read and write, and
the version of mxbench's synthetic data, which names the caches made from it. Cheap to import: ``host_build``
imports it on every reuse.
"""
SYNTHETIC_VERSION = 2  # bump when synthetic.py's images change, so that cached copies are made anew
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"


def batch_dir(path):
    """Where a CIFAR-10 folder keeps its batches: ``path/cifar-10-batches-py`` (the archive's layout)
    when there is one, else ``path`` itself (both pathlib paths)."""
    return path / FOLDER if (path / FOLDER).is_dir() else path

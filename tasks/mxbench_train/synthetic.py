"""Synthetic CIFAR-10 in the exact layout of the official python archive.

``cifar-10-batches-py/`` with ``data_batch_1..5``, ``test_batch`` and
``batches.meta``; each batch a pickled dict with ``data`` (N x 3072 uint8,
channel-major: 1024 red, 1024 green, 1024 blue), ``labels``, ``filenames`` and
``batch_label``. Every ``batch_label`` starts with ``SYNTHETIC`` so that data
made from it can say so wherever it shows. Images are noise plus a jittered blob
whose colour and place depend on the class: learnable, so accuracy curves rise.

Their version, ``data_sources.SYNTHETIC_VERSION``, names the caches made from them: bump it
when the images change.
"""
import pickle
import tarfile
from pathlib import Path

import numpy as np

from .data_sources import FOLDER

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SYNTHETIC_TAG = "SYNTHETIC"


def make_images(count, seed):
    """Noise plus one blob per image whose colour and place (jittered) depend on the class."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, count)
    palette = np.random.RandomState(1234).randint(60, 196, (10, 3))
    y, x = np.mgrid[0:32, 0:32]
    images = rng.randint(0, 100, (count, 3, 32, 32)).astype(np.int16)
    shifts = rng.randint(-4, 5, (count, 2))
    strength = rng.uniform(0.5, 1.0, count)
    for i, cls in enumerate(labels):
        cy, cx = 8 + (cls % 4) * 5 + shifts[i, 0], 8 + (cls // 4) * 7 + shifts[i, 1]
        blob = ((y - cy) ** 2 + (x - cx) ** 2) < 40
        images[i] += (palette[cls][:, None, None] * blob * strength[i]).astype(np.int16)
    return np.clip(images, 0, 255).astype(np.uint8).reshape(count, 3072), labels.tolist()


def write_batch(path, data, labels, batch_label, first_index):
    batch = {
        "batch_label": batch_label,
        "labels": labels,
        "data": data,
        "filenames": [f"synthetic_{first_index + i:06d}.png" for i in range(len(labels))],
    }
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def generate(out_dir, train=50000, test=10000, seed=0, archive=False):
    """Write ``out_dir/cifar-10-batches-py`` (and, with ``archive``, a .tar.gz of it)."""
    if train % 5:
        raise ValueError(f"train={train} must split into 5 equal batches")
    folder = Path(out_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    per_batch = train // 5
    for b in range(5):
        data, labels = make_images(per_batch, seed + b + 1)
        write_batch(folder / f"data_batch_{b + 1}", data, labels,
                    f"{SYNTHETIC_TAG} training batch {b + 1} of 5 (mxbench)", b * per_batch)
    data, labels = make_images(test, seed + 100)
    write_batch(folder / "test_batch", data, labels, f"{SYNTHETIC_TAG} testing batch 1 of 1 (mxbench)", train)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"num_cases_per_batch": per_batch, "label_names": CLASSES, "num_vis": 3072}, f, protocol=2)
    (folder / "readme.html").write_text("<p>SYNTHETIC CIFAR-10-format data made by mxbench; not CIFAR-10.</p>\n")
    if not archive:
        return folder
    tar_path = Path(out_dir) / "cifar-10-python-synthetic.tar.gz"
    with tarfile.open(tar_path, "w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname=FOLDER)
    return tar_path

"""``python -m mxbench_train prepare-cifar10``: the CIFAR-10 python archive to RecordIO, with im2rec.

Route: pickled arrays -> lossless PNG files + ``.lst`` -> MXNet's own
``python -m mxnet.tools.im2rec --pass-through`` (every core) -> ``.rec``/``.idx``
-> read back and compared with the source (counts, label histogram, pixels of a
sample). ``--pass-through`` packs the PNG bytes as they are: im2rec would
otherwise decode and re-encode each image for nothing.

Cached by content: ``manifest.json`` records the input's MD5 and the output
files; a rerun with the same input only re-hashes it. Atomic: everything is
built in a temporary folder, the old manifest is removed before files move in,
and the new manifest is written last, so an interrupted run never leaves a
complete-looking result.
"""
import fcntl
import hashlib
import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from .errors import MxbenchError
from .synthetic import FOLDER, SYNTHETIC_TAG

OFFICIAL_MD5 = "c58f30108f718f92721af3b95e74349a"
CONVERTER = "im2rec-pass-through-png/1"  # change when the output would differ
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"
OUTPUTS = {"train": "cifar10_train", "val": "cifar10_val"}
PIXEL_SAMPLE = 200  # records per split whose pixels are compared with the source
PNG_COMPRESSION = 1


def redact(source):
    """A source as it may be written down: no user or password from a URL."""
    parts = urllib.parse.urlsplit(str(source))
    if parts.scheme in ("http", "https", "file") and (parts.username or parts.password):
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return str(source)


def fetch(source, downloads: Path) -> Path:
    """A local path for ``source``: itself, or an http(s)/file URL downloaded once."""
    parts = urllib.parse.urlsplit(str(source))
    if parts.scheme not in ("http", "https", "file"):
        path = Path(source).expanduser()
        if not path.exists():
            raise MxbenchError(f"CIFAR-10 source {source} does not exist")
        return path
    name = Path(parts.path).name or "cifar-10-python.tar.gz"
    target = downloads / f"{hashlib.sha1(str(source).encode()).hexdigest()[:12]}-{name}"
    if target.is_file():
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(str(source), timeout=60) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (OSError, ValueError) as exc:
        partial.unlink(missing_ok=True)
        raise MxbenchError(f"cannot download CIFAR-10 from {redact(source)}: {exc}") from None
    partial.replace(target)
    return target


def content_md5(path: Path) -> str:
    digest = hashlib.md5()
    files = [path] if path.is_file() else [_batch_dir(path) / n for n in (*TRAIN_BATCHES, TEST_BATCH)]
    for file in files:
        if not file.is_file():
            raise MxbenchError(f"CIFAR-10 folder {path} has no {file.name}")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def _batch_dir(path: Path) -> Path:
    return path / FOLDER if (path / FOLDER).is_dir() else path


def _unpickle(raw: bytes, name: str, source):
    try:
        batch = pickle.loads(raw, encoding="bytes")
    except Exception as exc:  # a corrupt pickle raises nearly anything
        raise MxbenchError(f"CIFAR-10 source {source}: {name} is not a readable batch ({exc})") from None
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise MxbenchError(f"CIFAR-10 source {source}: {name} has no N x 3072 uint8 'data'")
    if labels is None or len(labels) != len(data) or not all(0 <= int(l) < 10 for l in labels):
        raise MxbenchError(f"CIFAR-10 source {source}: {name} labels do not match its data")
    label = batch.get("batch_label", "")
    label = label.decode(errors="replace") if isinstance(label, bytes) else str(label)
    return data, np.asarray(labels, dtype=np.int64), label


def load_batches(path: Path, source):
    """{'train': (data, labels), 'val': (...)} and whether the data is marked synthetic."""
    raws = {}
    if path.is_dir():
        for name in (*TRAIN_BATCHES, TEST_BATCH):
            raws[name] = (_batch_dir(path) / name).read_bytes()
    else:
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar.getmembers():
                    name = Path(member.name).name
                    if member.isfile() and name in (*TRAIN_BATCHES, TEST_BATCH):
                        raws[name] = tar.extractfile(member).read()
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise MxbenchError(f"CIFAR-10 archive {source} is corrupt or not a tar archive: {cause}") from None
        missing = [n for n in (*TRAIN_BATCHES, TEST_BATCH) if n not in raws]
        if missing:
            raise MxbenchError(f"CIFAR-10 archive {source} lacks {', '.join(missing)}")
    train = [_unpickle(raws[n], n, source) for n in TRAIN_BATCHES]
    test = _unpickle(raws[TEST_BATCH], TEST_BATCH, source)
    synthetic = all(label.startswith(SYNTHETIC_TAG) for *_, label in (*train, test))
    splits = {"train": (np.concatenate([d for d, _, _ in train]), np.concatenate([l for _, l, _ in train])),
              "val": (test[0], test[1])}
    return splits, synthetic


def to_bgr_images(data):
    """N x 3072 channel-major RGB rows -> N x 32 x 32 x 3 BGR, the layout OpenCV encodes."""
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)[..., ::-1])


_IMAGES = None  # set before the pool forks, so workers read the arrays without pickling them


def _write_pngs(job):
    import cv2

    folder, first, last = job
    for index in range(first, last):
        ok, png = cv2.imencode(".png", _IMAGES[index], [cv2.IMWRITE_PNG_COMPRESSION, PNG_COMPRESSION])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode image {index}")
        (Path(folder) / f"{index:05d}.png").write_bytes(png.tobytes())


def write_image_list(work: Path, images_root: Path, split: str, data, labels, threads):
    """PNG files under images_root/<split>/ and the im2rec list work/<prefix>.lst."""
    global _IMAGES
    folder = images_root / split
    folder.mkdir(parents=True)
    _IMAGES = to_bgr_images(data)
    chunk = max(1, -(-len(labels) // (threads * 4)))
    try:
        with multiprocessing.get_context("fork").Pool(threads) as pool:
            pool.map(_write_pngs, [(str(folder), i, min(i + chunk, len(labels)))
                                   for i in range(0, len(labels), chunk)])
    finally:
        _IMAGES = None
    with open(work / f"{OUTPUTS[split]}.lst", "w") as lst:
        lst.writelines(f"{i}\t{int(label)}\t{split}/{i:05d}.png\n" for i, label in enumerate(labels))


def start_im2rec(work: Path, images_root: Path, prefix: str, threads: int):
    cmd = [sys.executable, "-m", "mxnet.tools.im2rec", "--pass-through", "--no-shuffle",
           "--num-thread", str(threads), str(work / prefix), str(images_root)]
    return subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_im2rec(proc, work: Path, prefix: str):
    output, _ = proc.communicate()
    rec = work / f"{prefix}.rec"
    if proc.returncode != 0 or not rec.is_file():
        tail = output.strip().splitlines()[-1:] or ["no output"]
        raise MxbenchError(f"im2rec failed for {prefix} (exit {proc.returncode}): {tail[0]}")
    return rec


def scratch_dir(near: Path, needed_bytes: int) -> Path:
    """Where the intermediate PNG files go: memory (/dev/shm) when it has room, else beside the output.

    Tens of thousands of small files cost far more on a disk filesystem than in tmpfs.
    """
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * needed_bytes:
            return Path(tempfile.mkdtemp(prefix="mxbench-images-", dir=shm))
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="images-", dir=near))


def verify(rec: Path, data, labels):
    """Read the records back: count, keys, label histogram, and a sample's pixels."""
    import cv2
    import mxnet as mx

    reader = mx.recordio.MXIndexedRecordIO(str(rec.with_suffix(".idx")), str(rec), "r")
    try:
        keys = sorted(reader.keys)
        if keys != list(range(len(labels))):
            raise MxbenchError(f"verification of {rec.name} failed: {len(keys)} records for {len(labels)} images")
        found = Counter()
        sample = set(np.linspace(0, len(labels) - 1, min(PIXEL_SAMPLE, len(labels))).astype(int).tolist())
        for key in keys:
            header, payload = mx.recordio.unpack(reader.read_idx(key))
            found[int(header.label)] += 1
            if int(header.label) != int(labels[key]):
                raise MxbenchError(f"verification of {rec.name} failed: record {key} has label "
                                   f"{int(header.label)}, source has {int(labels[key])}")
            if key in sample:
                image = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
                if image is None or not np.array_equal(image, to_bgr_images(data[key:key + 1])[0]):
                    raise MxbenchError(f"verification of {rec.name} failed: record {key} pixels differ from source")
    finally:
        reader.close()
    expected = Counter(int(l) for l in labels)
    if found != expected:
        raise MxbenchError(f"verification of {rec.name} failed: label histogram {dict(found)} != {dict(expected)}")
    return {str(k): found[k] for k in sorted(found)}


def cached_manifest(out: Path, key: dict):
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("key") != key:
        return None
    for name, size in manifest.get("files", {}).items():
        if not (out / name).is_file() or (out / name).stat().st_size != size:
            return None
    return manifest


def prepare(source, out_dir, allow_unverified=False, threads=None):
    """Convert ``source`` into ``out_dir``; return the manifest (``cache_hit`` says if it was reused)."""
    started = time.perf_counter()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = open(out / ".lock", "w")
    except OSError as exc:
        raise MxbenchError(f"output directory {out} is not writable: {exc.strerror or exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two DAG runs preparing the same folder take turns
        local = fetch(source, out / "downloads")
        md5 = content_md5(local)
        verified = local.is_file() and md5 == OFFICIAL_MD5
        if not verified and not allow_unverified:
            what = "archive" if local.is_file() else "folder"
            raise MxbenchError(
                f"CIFAR-10 source {redact(source)} is not the official archive (MD5 {md5}, expected "
                f"{OFFICIAL_MD5} of cifar-10-python.tar.gz); to use this {what} anyway pass --allow-unverified")
        key = {"content_md5": md5, "converter": CONVERTER}
        manifest = cached_manifest(out, key)
        if manifest:
            return {**manifest, "cache_hit": True, "seconds": round(time.perf_counter() - started, 3)}
        manifest = _convert(local, source, out, key, verified, threads or os.cpu_count() or 1)
        manifest["seconds"] = round(time.perf_counter() - started, 3)
        return manifest


def _convert(local, source, out, key, verified, threads):
    splits, synthetic = load_batches(local, redact(source))
    for stale in out.glob(".tmp-*"):  # left by an interrupted run; we hold the lock
        try:
            shutil.rmtree((stale / "scratch-path").read_text(), ignore_errors=True)
        except OSError:
            pass
        shutil.rmtree(stale, ignore_errors=True)
    work = out / f".tmp-{os.getpid()}"
    work.mkdir()
    images_root = scratch_dir(work, sum(d.nbytes for d, _ in splits.values()))
    (work / "scratch-path").write_text(str(images_root))
    try:
        for split, (data, labels) in splits.items():
            write_image_list(work, images_root, split, data, labels, threads)
        # one im2rec per split, side by side: together they keep every core busy
        per_split = max(1, threads // len(splits))
        running = {split: start_im2rec(work, images_root, OUTPUTS[split], per_split) for split in splits}
        try:
            recs = {split: finish_im2rec(proc, work, OUTPUTS[split]) for split, proc in running.items()}
        finally:
            for proc in running.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        summary = {}
        for split, (data, labels) in splits.items():
            summary[split] = {"file": recs[split].name, "records": int(len(labels)),
                              "label_histogram": verify(recs[split], data, labels)}
        (out / "manifest.json").unlink(missing_ok=True)  # from here on the folder is incomplete
        files = {}
        for prefix in OUTPUTS.values():
            for suffix in (".rec", ".idx"):
                (work / f"{prefix}{suffix}").replace(out / f"{prefix}{suffix}")
                files[f"{prefix}{suffix}"] = (out / f"{prefix}{suffix}").stat().st_size
        manifest = {"key": key, "source": redact(source), "verified": verified, "synthetic": synthetic,
                    "splits": summary, "files": files, "cache_hit": False}
        tmp = work / "manifest.json"
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        tmp.replace(out / "manifest.json")
        return manifest
    finally:
        shutil.rmtree(images_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

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

Untrusted input: the source is fetched by ``download`` (deadline, size cap, what an
untrusted source may reach), batches are unpickled by an allow-list (a crafted pickle runs
no code), and archives are unpacked under byte caps (no gzip bomb). Limits, from the
environment: MXBENCH_TAR_MEMBER_MAX_BYTES (64 MiB), MXBENCH_TAR_MAX_BYTES (1 GiB). A
download that fails verification is deleted, and no digest of an unverified file is printed.
"""
import bz2
import codecs
import fcntl
import gzip
import io
import json
import lzma
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Optional

import numpy as np

from .data_sources import TEST_BATCH, TRAIN_BATCHES, batch_dir
from .download import SourcePolicy, content_md5, fetch, limit
from .errors import MxbenchError
from .redaction import redact
from .synthetic import SYNTHETIC_TAG

OFFICIAL_MD5 = "c58f30108f718f92721af3b95e74349a"
CONVERTER = "im2rec-pass-through-png/1"  # change when the output would differ
OUTPUTS = {"train": "cifar10_train", "val": "cifar10_val"}
PIXEL_SAMPLE = 200  # records per split whose pixels are compared with the source
PNG_COMPRESSION = 1
MEMBER_MAX_BYTES = 64 << 20  # one batch is ~31 MB
TAR_MAX_BYTES = 1 << 30  # everything unpacked from an archive; the official one is ~178 MB


try:
    from numpy._core.multiarray import _reconstruct  # numpy 2
except ImportError:
    from numpy.core.multiarray import _reconstruct  # numpy 1

# Every global an official batch (a Python 2 pickle) or one written by synthetic.py (Python 3,
# protocol 2: bytes as _codecs.encode) or by numpy 2 (numpy._core) refers to. Dicts, lists,
# strings and numbers need none.
def _empty_array(cls, shape, dtype_code):
    """numpy's array reconstruction in the one form a pickled array uses: an empty base array that
    __setstate__ then fills from the pickle's own bytes, so its size is bounded by the batch's.
    Any other shape would allocate whatever a crafted batch asks for."""
    if cls is not np.ndarray or tuple(shape) != (0,) or dtype_code not in (b"b", "b"):
        # numbers only: anything else the pickle holds is its content, never quoted
        numbers = isinstance(shape, tuple) and all(type(n) is int for n in shape)
        raise MxbenchError(f"an array reconstruction with shape {shape if numbers else '(not numbers)'}, "
                           "which no CIFAR-10 batch holds")
    return _reconstruct(cls, shape, dtype_code)


def _number_dtype(*args):
    """numpy.dtype for numbers only: object arrays would unpickle arbitrary objects again."""
    dtype = np.dtype(*args)
    if dtype.kind not in "biuf":
        raise MxbenchError(f"an array of type {dtype!r}, which no CIFAR-10 batch holds")
    return dtype


BATCH_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _empty_array,
    ("numpy._core.multiarray", "_reconstruct"): _empty_array,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _number_dtype,
    ("_codecs", "encode"): codecs.encode,
}


class BatchUnpickler(pickle.Unpickler):
    """Unpickles a batch with only BATCH_GLOBALS: pickle.loads would call whatever a crafted one names."""

    def __init__(self, raw: bytes, name: str, source):
        super().__init__(io.BytesIO(raw), encoding="bytes")
        self.name, self.source = name, source

    def find_class(self, module, name):
        found = BATCH_GLOBALS.get((module, name))
        if found is None:
            # the global is not quoted: its module and name are the file's first two lines when it
            # starts with pickle's GLOBAL opcode, and the file may be a worker's secret hard-linked here
            raise MxbenchError(f"CIFAR-10 source {self.source}: {self.name} refers to a Python global that no "
                               "CIFAR-10 batch holds (a crafted pickle's way to run code); refused without "
                               "running it")
        return found


def _unpickle(raw: bytes, name: str, source):
    try:
        batch = BatchUnpickler(raw, name, source).load()
    except MxbenchError as exc:
        if str(exc).startswith("CIFAR-10 source"):
            raise
        raise MxbenchError(f"CIFAR-10 source {source}: {name} holds {exc}; refused") from None
    except Exception as exc:  # a corrupt pickle raises nearly anything
        # the type only: pickle's messages quote the file's bytes ("invalid load key, '-'"), and the
        # file may be a worker's secret hard-linked into an allowed folder
        raise MxbenchError(f"CIFAR-10 source {source}: {name} is not a readable batch "
                           f"(its pickle does not parse: {type(exc).__name__})") from None
    if not isinstance(batch, dict):
        raise MxbenchError(f"CIFAR-10 source {source}: {name} is a {type(batch).__name__}, not a batch dict")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise MxbenchError(f"CIFAR-10 source {source}: {name} has no N x 3072 uint8 'data'")
    if (not isinstance(labels, (list, np.ndarray)) or len(labels) != len(data)
            or not all(isinstance(label, (int, np.integer)) and 0 <= label < 10 for label in labels)):
        raise MxbenchError(f"CIFAR-10 source {source}: {name} labels do not match its data")
    label = batch.get("batch_label", "")
    label = label.decode(errors="replace") if isinstance(label, bytes) else str(label)
    return data, np.asarray(labels, dtype=np.int64), label


class _Capped:
    """A decompressed archive stream that refuses to yield more than ``limit`` bytes (no gzip bomb)."""

    def __init__(self, raw, limit_bytes: int, source):
        self.raw, self.left, self.limit, self.source = raw, limit_bytes, limit_bytes, source

    def read(self, size=-1):
        data = self.raw.read(self.left + 1 if size is None or size < 0 else size)
        self.left -= len(data)
        if self.left < 0:
            raise MxbenchError(f"CIFAR-10 archive {self.source} unpacks to more than {self.limit} bytes "
                               f"(MXBENCH_TAR_MAX_BYTES); refused")
        return data


def _decompressed(path: Path):
    """The archive's tar stream, decompressed by what its first bytes say it is."""
    with open(path, "rb") as f:
        magic = f.read(6)
    for prefix, opener in ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open)):
        if magic.startswith(prefix):
            return opener(path, "rb")
    return open(path, "rb")


def load_batches(path: Path, source):
    """{'train': (data, labels), 'val': (...)} and whether the data is marked synthetic."""
    raws = {}
    member_max = limit("MXBENCH_TAR_MEMBER_MAX_BYTES", MEMBER_MAX_BYTES)
    if path.is_dir():
        for name in (*TRAIN_BATCHES, TEST_BATCH):
            file = batch_dir(path) / name
            if file.stat().st_size > member_max:
                raise MxbenchError(f"CIFAR-10 folder {source}: {name} has {file.stat().st_size} bytes, more "
                                   f"than {member_max} (MXBENCH_TAR_MEMBER_MAX_BYTES); refused")
            with open(file, "rb") as f:  # at most the cap, whatever the file is (a FIFO, /dev/zero)
                raws[name] = f.read(member_max + 1)
            if len(raws[name]) > member_max:
                raise MxbenchError(f"CIFAR-10 folder {source}: {name} has more than {member_max} bytes "
                                   "(MXBENCH_TAR_MEMBER_MAX_BYTES); refused")
    else:
        total_max = limit("MXBENCH_TAR_MAX_BYTES", TAR_MAX_BYTES)
        try:
            # a stream ("r|"), so that every byte tarfile unpacks, headers included, passes the cap
            with _decompressed(path) as raw, \
                    tarfile.open(fileobj=_Capped(raw, total_max, source), mode="r|") as tar:
                for member in tar:
                    if member.isfile() and member.size > member_max:
                        raise MxbenchError(
                            f"CIFAR-10 archive {source}: member {member.name!r} declares {member.size} bytes, "
                            f"more than {member_max} (MXBENCH_TAR_MEMBER_MAX_BYTES); refused")
                    name = Path(member.name).name
                    if member.isfile() and name in (*TRAIN_BATCHES, TEST_BATCH):
                        raws[name] = tar.extractfile(member).read()
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
            cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise MxbenchError(f"CIFAR-10 archive {source} is corrupt or not a tar archive: {cause}") from None
        missing = [n for n in (*TRAIN_BATCHES, TEST_BATCH) if n not in raws]
        if missing:
            raise MxbenchError(f"CIFAR-10 archive {source} lacks {', '.join(missing)}")
    train = [_unpickle(raws[n], n, source) for n in TRAIN_BATCHES]
    test = _unpickle(raws[TEST_BATCH], TEST_BATCH, source)
    synthetic = all(label.startswith(SYNTHETIC_TAG) for *_, label in (*train, test))
    splits = {"train": (np.concatenate([d for d, _, _ in train]), np.concatenate([labels for _, labels, _ in train])),
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
    expected = Counter(int(label) for label in labels)
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


def prepare(source, out_dir, allow_unverified=False, threads=None, policy: Optional[SourcePolicy] = None):
    """Convert ``source`` into ``out_dir``; return the manifest (``cache_hit`` says if it was reused).
    ``policy``: what an untrusted source may reach (None: anything, a person at the command line)."""
    started = time.perf_counter()
    out = Path(out_dir).absolute()  # im2rec runs in a subfolder: a relative path would point elsewhere
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = open(out / ".lock", "w")
    except OSError as exc:
        raise MxbenchError(f"output directory {out} is not writable: {exc.strerror or exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two DAG runs preparing the same folder take turns
        local = fetch(source, out / "downloads", policy)
        downloaded = local.parent == out / "downloads"
        try:
            md5 = content_md5(local)
            verified = local.is_file() and md5 == OFFICIAL_MD5
            if not verified and not allow_unverified:
                # no digest of it in the message: it would tell a trigger user about a file's content
                what = "archive" if local.is_file() else "folder"
                raise MxbenchError(
                    f"CIFAR-10 source {redact(source)} is not the official archive (its MD5 is not "
                    f"{OFFICIAL_MD5}, that of cifar-10-python.tar.gz); to use this {what} anyway pass "
                    "--allow-unverified")
            key = {"content_md5": md5, "converter": CONVERTER}
            manifest = cached_manifest(out, key)
            if manifest:
                return {**manifest, "cache_hit": True, "seconds": round(time.perf_counter() - started, 3)}
            manifest = _convert(local, source, out, key, verified, threads or os.cpu_count() or 1)
        except MxbenchError:
            if downloaded:  # a download that failed verification is not kept
                local.unlink(missing_ok=True)
            raise
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

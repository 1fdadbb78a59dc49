"""Data preparation benchmark (run in the training env): the im2rec route against its floor.

    .venv/train/bin/python benchmarks/prepare_data.py [--train 50000 --test 10000]

Measures, side by side in one run on the same SYNTHETIC CIFAR-10 arrays:
  route   prepare-cifar10 (PNG files + im2rec on every core + read-back verification)
  floor   mx.recordio.pack_img of the arrays straight into .rec/.idx (PNG, one process)
  cached  prepare-cifar10 again on the same input
Targets: route <= 2.0 x floor; cached <= 1 s.
"""
import argparse
import tempfile
import time
from pathlib import Path

import mxnet as mx

from mxbench_train.cifar10 import PNG_COMPRESSION, load_batches, prepare, to_bgr_images
from mxbench_train.synthetic import generate


def floor(splits, out: Path):
    for split, (data, labels) in splits.items():
        writer = mx.recordio.MXIndexedRecordIO(str(out / f"{split}.idx"), str(out / f"{split}.rec"), "w")
        for i, (image, label) in enumerate(zip(to_bgr_images(data), labels)):
            header = mx.recordio.IRHeader(0, float(label), i, 0)
            writer.write_idx(i, mx.recordio.pack_img(header, image, quality=PNG_COMPRESSION, img_fmt=".png"))
        writer.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--test", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = generate(tmp / "src", args.train, args.test)
        t0 = time.perf_counter()
        manifest = prepare(source, tmp / "route", allow_unverified=True)
        route = time.perf_counter() - t0
        t0 = time.perf_counter()
        cached = prepare(source, tmp / "route", allow_unverified=True)
        cached_s = time.perf_counter() - t0
        assert cached["cache_hit"], "second run should be a cache hit"
        splits, _ = load_batches(source, source)
        (tmp / "floor").mkdir()
        t0 = time.perf_counter()
        floor(splits, tmp / "floor")
        floor_s = time.perf_counter() - t0
    images = args.train + args.test
    print(f"images: {images} (SYNTHETIC CIFAR-10 layout), records verified: "
          f"{manifest['splits']['train']['records'] + manifest['splits']['val']['records']}")
    print(f"im2rec route: {route:.2f} s   floor (pack_img): {floor_s:.2f} s   cached rerun: {cached_s:.3f} s")
    print(f"ratio route/floor: {route / floor_s:.2f}  (target <= 2.0)   cached <= 1 s: {cached_s <= 1.0}")


if __name__ == "__main__":
    main()

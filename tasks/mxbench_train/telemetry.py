"""GPU telemetry and environment capture, through ``nvidia-smi`` (stdlib only).

The sampler runs ``nvidia-smi --query-gpu=... --format=csv -lms N`` beside the
trainer and keeps its CSV as written, so any tool that reads nvidia-smi's CSV
reads ours. On a machine with no GPU it records why, and training goes on.
"""
import csv
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

from .plan_runner import die_with

QUERY = "timestamp,index,name,utilization.gpu,memory.used,memory.total"
PROBE_TIMEOUT_S = 15


def _nvidia_smi(*args, timeout=PROBE_TIMEOUT_S):
    """nvidia-smi's stdout, or None (with the reason) when there is no usable GPU."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, "nvidia-smi not found"
    except OSError as exc:  # not executable, and the like: no usable GPU tool
        return None, f"nvidia-smi cannot run: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi {' '.join(args)} timed out"
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        return None, f"nvidia-smi failed: {message[0] if message else 'exit ' + str(done.returncode)}"
    return done.stdout, None


class GpuSampler:
    """Samples utilisation and memory of ``gpus`` into ``csv_path`` while running."""

    def __init__(self, gpus, csv_path, topo_path=None, period_ms=500):
        self.gpus, self.csv_path, self.topo_path, self.period_ms = list(gpus), Path(csv_path), topo_path, period_ms
        self.proc = None
        self.reason = None

    def start(self):
        if not self.gpus:
            self.reason = "training on the CPU"
            return self
        listing, self.reason = _nvidia_smi("-L")
        if listing is None:
            return self
        if self.topo_path:
            topo, _ = _nvidia_smi("topo", "-m")
            if topo is not None:
                Path(self.topo_path).write_text(topo)
        out = open(self.csv_path, "w")
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv", "-lms", str(self.period_ms),
             "-i", ",".join(str(g) for g in self.gpus)],
            stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            preexec_fn=die_with(os.getpid()))  # a SIGKILLed trainer takes its sampler with it
        out.close()
        return self

    def stop(self):
        """Stop sampling; return the summary for the run_end event."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.reason:
            return {"available": False, "reason": self.reason}
        return {"available": True, "csv": self.csv_path.name, "per_gpu": summarise(read_gpu_csv(self.csv_path))}


def _number(text):
    match = re.search(r"-?\d+(\.\d+)?", text or "")
    return float(match.group()) if match else None


def read_gpu_csv(path):
    """Rows of an nvidia-smi ``--format=csv`` file as dicts with numbers, skipping bad lines."""
    rows = []
    with open(path, newline="") as f:
        for record in csv.reader(f, skipinitialspace=True):
            if len(record) != 6 or record[0] == "timestamp":
                continue
            index, util, used, total = (_number(x) for x in (record[1], record[3], record[4], record[5]))
            if index is None or util is None or used is None:
                continue  # e.g. "[N/A]" or a line cut off when the sampler was stopped
            rows.append({"timestamp": record[0], "index": int(index), "name": record[2],
                         "utilization_pct": util, "memory_used_mib": used, "memory_total_mib": total})
    return rows


def summarise(rows):
    per_gpu = {}
    for row in rows:
        per_gpu.setdefault(row["index"], []).append(row)
    return [{"index": index, "name": samples[0]["name"], "samples": len(samples),
             "utilization_mean_pct": round(sum(s["utilization_pct"] for s in samples) / len(samples), 1),
             "memory_used_max_mib": max(s["memory_used_mib"] for s in samples)}
            for index, samples in sorted(per_gpu.items())]


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_environment():
    """GPU models, driver and CUDA version as nvidia-smi reports them, or why not."""
    listing, reason = _nvidia_smi("--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader")
    if listing is None:
        return {"available": False, "reason": reason}
    gpus = []
    for record in csv.reader(listing.splitlines(), skipinitialspace=True):
        if len(record) == 4:
            gpus.append({"index": int(_number(record[0]) or 0), "name": record[1],
                         "memory_total_mib": _number(record[3])})
    driver = next(csv.reader(listing.splitlines()[:1], skipinitialspace=True), [None] * 3)[2]
    banner, _ = _nvidia_smi()
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", banner or "")
    return {"available": True, "gpus": gpus, "driver": driver, "cuda": cuda.group(1) if cuda else None}


def machine_facts():
    """The facts that name the kind of machine (the store's fingerprint): CPU model and count, GPUs."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "gpu": gpu_environment()}


def environment(mxnet_module=None):
    """What the report needs to say where a number came from."""
    env = {
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "platform": platform.platform(),
        **machine_facts(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if mxnet_module is not None:
        from mxnet.runtime import Features

        features = Features()
        env["mxnet_version"] = mxnet_module.__version__
        # a source build reports its release (1.9.1): the commit it was built from is the image's word
        # (docker/train-source.Dockerfile sets it), which the run's post-run check compares with the build asked
        commit = os.environ.get("MXBENCH_MXNET_COMMIT")
        if commit:
            env["mxnet_commit"] = commit[:40]
        env["mxnet_features"] = sorted(name for name in features if features.is_enabled(name))
    return env

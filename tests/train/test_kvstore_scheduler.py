"""The kvstore scheduler role without MXNet's Python package (``mxbench_train.kvstore_scheduler``):
the library ``import mxnet`` loads, a real scheduler listening on its port with no mxnet module
imported, and a library that cannot load named. Whole dist_sync jobs through it:
test_plan_runner, and every dist variant of the DAG tests."""
import json
import os
import socket
import subprocess

from conftest import run_trainer, train_python
from mxbench_train.localhost import free_port
from support.waiting import wait_for


def test_the_library_is_the_one_import_mxnet_loads_and_finding_it_imports_no_mxnet_module():
    done = subprocess.run([train_python(), "-c", """
import json, sys
from mxbench_train import kvstore_scheduler
found = kvstore_scheduler.library_path()
before = sorted(m for m in sys.modules if m == "mxnet" or m.startswith("mxnet."))
import mxnet
print(json.dumps({"found": found, "before": before, "loaded": mxnet.base._LIB._name}))
"""], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] == []
    assert os.path.samefile(seen["found"], seen["loaded"]) and seen["found"].endswith("libmxnet.so")


def test_a_scheduler_role_listens_on_its_port_with_no_mxnet_module_imported(tmp_path):
    port = free_port()
    env = {**os.environ, "DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
           "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1", "DMLC_NODE_HOST": "127.0.0.1"}
    imports = tmp_path / "imports.log"
    with open(imports, "w") as err:
        # -X importtime: a line on stderr per module imported, as it is
        proc = subprocess.Popen([train_python(), "-X", "importtime", "-m", "mxbench_train", "serve"], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        def listening():
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        assert wait_for(listening, timeout=60), imports.read_text()[-2000:]
        assert proc.poll() is None  # waits for its nodes
        maps = (f"/proc/{proc.pid}/maps")
        with open(maps) as mapped:
            assert "libmxnet.so" in mapped.read()
    finally:
        proc.kill()
        proc.wait()
    modules = [line.rsplit("|", 1)[-1].strip() for line in imports.read_text().splitlines() if "|" in line]
    assert "mxbench_train.kvstore_scheduler" in modules
    assert not [m for m in modules if m == "mxnet" or m.startswith("mxnet.")]


def test_a_library_that_cannot_load_is_named(tmp_path):
    not_a_library = tmp_path / "libmxnet.so"
    not_a_library.write_text("not ELF")
    env = {**os.environ, "DMLC_ROLE": "scheduler", "MXNET_LIBRARY_PATH": str(not_a_library)}
    done = run_trainer("serve", env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: kvstore scheduler: cannot load {not_a_library}: ")

"""mxbench as a deployment installs it: wheels built from the tree, installed into a fresh venv (no editable
install, no checkout on the path), where every module imports, the package data is there (the store's
migrations, the DAG files, the versions manifest), and Airflow finds the UI plugin through its entry point,
once, also when a plugins folder offers plugins/mxbench_ui.py as well.

Airflow is not installed again: the fresh venv reaches the orchestration env's packages through a .pth file
naming a folder of links to them, less the editable mxbench and mxbench_train, so that only the wheels'
copies can be found."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow  # two wheel builds (pip, build isolation from the configured index): ~30 s
PLUGIN = "mxbench.airflow_glue.ui_plugin:MxbenchUIPlugin"
TREE = ["pyproject.toml", "setup.py", "plugins", "standins", "dags", "config", "requirements-train.txt", "tasks"]


def run(argv, **kwargs):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh venv's python, the wheels folder), both wheels installed there with --no-deps."""
    root = tmp_path_factory.mktemp("package")
    source = root / "source"  # a copy: pip builds in the tree it is given, and must not write into the checkout
    source.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in TREE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=skip)
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = root / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(source),
         str(source / "tasks")])
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet",
         *map(str, sorted(wheels.glob("*.whl")))])
    # the orchestration env's packages, less its (editable) mxbench and mxbench_train
    env_site = Path(sysconfig.get_paths()["purelib"])
    links = root / "orchestration-site"
    links.mkdir()
    for entry in env_site.iterdir():
        if not entry.name.lower().startswith(("mxbench", "__editable__")):
            (links / entry.name).symlink_to(entry)
    fresh_site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    Path(fresh_site, "orchestration-env.pth").write_text(f"{links}\n")
    return python, wheels, Path(fresh_site)


def fresh_env(tmp_path, plugins: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "MXBENCH"))}
    return {**env, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "MXBENCH_HOME": str(tmp_path / "home")}


def test_the_wheels_hold_every_module_of_the_tree(installed):
    _, wheels, _ = installed
    for wheel, folders in (("mxbench-", {"mxbench": REPO / "plugins" / "mxbench", "standins": REPO / "standins"}),
                           ("mxbench_train-", {"mxbench_train": REPO / "tasks" / "mxbench_train"})):
        names = set(zipfile.ZipFile(next(wheels.glob(wheel + "0*.whl"))).namelist())
        for package, folder in folders.items():
            tree = {f"{package}/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts}
            assert tree and tree <= names, sorted(tree - names)


def test_every_module_imports_from_the_installed_package_with_its_data(installed, tmp_path):
    python, _, site = installed
    probe = f"""
import importlib, json, pkgutil, sys
import mxbench, standins
from mxbench import config
from mxbench.builds import mxnet_builds
from mxbench.store import database
names = []
for package in (mxbench, standins):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
        names.append(module.name)
revision = database.migrate("sqlite:///" + {str(tmp_path / "results.db")!r})
ours = [m.__file__ for m in list(sys.modules.values())
        if m.__name__.split(".")[0] in ("mxbench", "mxbench_train", "standins")]
print(json.dumps({{"modules": names, "files": ours,
                  "revision": revision, "dags": sorted(p.name for p in config.dags_folder().glob("*.py")),
                  "dags_folder": str(config.dags_folder()), "manifest": str(mxnet_builds.MANIFEST),
                  "builds": len(mxnet_builds.load_manifest()), "requirements": mxnet_builds.requirement_lines()}}))
"""
    found = json.loads(run([str(python), "-c", probe], env=fresh_env(tmp_path, tmp_path / "plugins"),
                           cwd=tmp_path).splitlines()[-1])
    sources = {str(p.relative_to(REPO / "plugins").with_suffix("")).replace("/", ".")
               for p in (REPO / "plugins" / "mxbench").rglob("*.py")
               if p.name != "__init__.py" and "migrations" not in p.parts}
    assert sources <= set(found["modules"]), sorted(sources - set(found["modules"]))
    assert {"mxbench.hosts.quiet_gate", "mxbench.airflow_glue.ui_plugin", "standins.kube"} <= set(found["modules"])
    assert all(f.startswith(str(site)) for f in found["files"]), [f for f in found["files"] if str(site) not in f]
    assert found["revision"] == sorted((REPO / "plugins/mxbench/store/migrations/versions").glob("0*.py"))[-1].stem[:4]
    assert found["dags"] == sorted(p.name for p in (REPO / "dags").glob("*.py"))
    assert found["dags_folder"] == str(site / "mxbench" / "dags")
    assert found["manifest"] == str(site / "mxbench" / "builds" / "mxnet-builds.json") and found["builds"] >= 3
    assert "mxnet==1.9.1" in found["requirements"]
    assert run([str(python.with_name("mxbench")), "dags-folder"]).strip() == found["dags_folder"]


PLUGINS = """
import json
from airflow import plugins_manager
info = plugins_manager.get_plugin_info()
print(json.dumps({"plugins": [[p["name"], str(p.get("source"))] for p in info],
                  "errors": plugins_manager.get_import_errors()}))
"""


@pytest.mark.parametrize("plugins_folder", ["empty", "with mxbench_ui.py"])
def test_airflow_finds_the_ui_plugin_once_through_its_entry_point(installed, tmp_path, plugins_folder):
    python, _, _ = installed
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    if plugins_folder != "empty":
        shutil.copy2(REPO / "plugins" / "mxbench_ui.py", plugins)
    found = json.loads(run([str(python), "-c", PLUGINS], env=fresh_env(tmp_path, plugins),
                           cwd=tmp_path).splitlines()[-1])
    assert found["errors"] == {}
    mxbench = [source for name, source in found["plugins"] if name == "mxbench"]
    assert len(mxbench) == 1 and "mxbench==0.1.0" in mxbench[0] and PLUGIN.split(":")[0] in mxbench[0], found

"""The architecture as rules that fail: which modules may import Airflow, which packages may import
which (the floors, top to bottom), and which of the trainer's modules stay stdlib-only so that the
orchestration side can import them, and that the Airflow side (plugins, DAGs, stand-ins) never
imports mxnet. The launchers' own rule (no launcher imports another) is in
launchers/test_launcher_contract.py."""
import ast
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "plugins" / "mxbench"
TRAINER = REPO / "tasks" / "mxbench_train"

# Top to bottom: a module may import its own package and the floors below it, never above.
FLOORS = [
    {"airflow_glue", "cli"},
    {"stages"},
    {"report"},
    {"store"},
    {"artifacts"},
    {"launchers"},
    {"builds"},
    {"hosts"},  # the quiet check and the doctor: judged with results' thresholds
    {"regression", "results"},
    {"matrix"},
    {"stats"},
    {"config"},
    {"run_folder"},  # the DAG run folder's layout; config reads a folder's request through it
]
# Airflow's object storage is the artifact store's file system (files travel between workers
# through ObjectStoragePath): the one module outside the glue that opens it.
AIRFLOW_OUTSIDE_THE_GLUE = {"artifacts/object_store.py"}
# The trainer's modules that need mxnet or numpy; every other one is imported by the
# orchestration side (no mxnet, maybe another numpy) or runs on a host with a bare Python.
TRAINING_ONLY = {"__main__", "train", "resnet", "cifar10", "synthetic"}


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def imported(path):
    """Every module ``path`` imports, at the top or inside a function (relative ones resolved)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import; mxbench imports absolutely"
            names.add(node.module)
            if node.module == "mxbench":
                names |= {f"mxbench.{alias.name}" for alias in node.names}
    return names


def package_of(path):
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def floor_of(package):
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def test_every_package_has_a_floor():
    packages = {package_of(p) for p in modules()} - {"__init__"}
    assert packages == set().union(*FLOORS)


def mxnet_imports(path):
    """Each ``import mxnet...`` / ``from mxnet... import`` in ``path``, at any level (top, function, class)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [f"{path.name}:{node.lineno} imports {name}" for name in names
                  if name == "mxnet" or name.startswith("mxnet.")]
    return found


def test_the_plugins_dags_and_standins_never_import_mxnet():
    # .venv/airflow has no mxnet (numpy 2 there): such an import fails only when that code runs
    paths = [p for folder in (PACKAGE, REPO / "dags", REPO / "standins") for p in folder.rglob("*.py")]
    assert len(paths) > 100  # the trees were read
    assert [line for path in paths for line in mxnet_imports(path)] == []


def test_the_mxnet_check_sees_an_import_at_any_level(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text("import mxnetwork\nfrom .mxnet import x\n\n\ndef f():\n    import mxnet as mx\n\n\n"
                    "class C:\n    from mxnet.gluon import nn\n")
    assert mxnet_imports(fake) == ["fake.py:6 imports mxnet", "fake.py:10 imports mxnet.gluon"]


def test_only_the_glue_imports_airflow():
    importers = {str(p.relative_to(PACKAGE)) for p in modules()
                 if any(m == "airflow" or m.startswith("airflow.") for m in imported(p))}
    outside = {p for p in importers if not p.startswith("airflow_glue/")}
    assert outside == AIRFLOW_OUTSIDE_THE_GLUE
    assert {p for p in importers if p.startswith("airflow_glue/")}, "the glue imports Airflow"


def upward_imports(path, own):
    """What ``path`` (a module of package ``own``) imports from a floor at or above its own."""
    upward = []
    for name in imported(path):
        if name.startswith("mxbench."):
            other = name.split(".")[1]
            if other != own and floor_of(other) <= floor_of(own):
                upward.append(f"{path.name} imports {name}")
    return upward


def test_no_package_imports_one_above_it():
    upward = [f"{path.relative_to(PACKAGE)}: {line}" for path in modules() if package_of(path) != "__init__"
              for line in upward_imports(path, package_of(path))]
    assert not upward, "\n".join(upward)


def test_the_floor_rule_sees_an_upward_import(tmp_path):
    fake = tmp_path / "store_mod.py"
    fake.write_text("from mxbench.stages import pipeline\nfrom mxbench.stats import verdict\n")
    assert upward_imports(fake, "store") == ["store_mod.py imports mxbench.stages"]


def module_name(path, root=PACKAGE):
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root=PACKAGE):
    """Module -> the modules of the same package it imports (``from pkg import mod`` counts as
    ``pkg.mod``; the trainer's relative imports resolved)."""
    paths = sorted(p for p in root.rglob("*.py") if "migrations" not in p.parts)
    known = {module_name(p, root) for p in paths}
    graph = {}
    for path in paths:
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # the trainer's package is flat: one level up is the package
                    module = f"{root.name}.{module}".rstrip(".")
                names = [module] + [f"{module}.{alias.name}" for alias in node.names]
            edges |= {name for name in names if name in known}
        graph[module_name(path, root)] = edges - {module_name(path, root)}
    return graph


def cycles(graph):
    """Every import circle (as a list of modules), found by depth-first search."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


@pytest.mark.parametrize("root", [PACKAGE, TRAINER], ids=["mxbench", "mxbench_train"])
def test_no_import_circle_between_modules(root):
    graph = import_graph(root)
    assert sum(map(len, graph.values())) > 20  # the graph was read
    assert cycles(graph) == []


def test_the_circle_check_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


# every folder that holds Python importing our modules
IMPORTERS = ("plugins", "dags", "tasks", "tests", "benchmarks", "standins", "scripts")


def is_our_module(dotted):
    top, *rest = dotted.split(".")
    root = {"mxbench": PACKAGE, "mxbench_train": TRAINER}.get(top)
    if root is None:
        return False
    base = root.joinpath(*rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_under_another_name(path):
    """``import m as n`` and ``from p import m as n`` of one of our modules where n is not m: a reader
    of ``n.f()`` would look for a module n."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            pairs = [(alias.name, alias.asname) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # only the trainer imports relatively, from its own flat package
                module = f"{TRAINER.name}.{module}".rstrip(".")
            pairs = [(f"{module}.{alias.name}", alias.asname) for alias in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {name} as {asname}" for name, asname in pairs
                  if asname and asname != name.rsplit(".", 1)[-1] and is_our_module(name)]
    return found


def test_every_module_is_imported_under_its_own_name():
    paths = [p for folder in IMPORTERS for p in (REPO / folder).rglob("*.py")]
    assert len(paths) > 200  # the tree was read
    renamed = [line for path in paths for line in imports_under_another_name(path)]
    assert not renamed, "\n".join(renamed)


def test_the_name_check_sees_a_module_under_another_name(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text("import mxbench.stages.pipeline as stages\n"
                    "from mxbench.builds import mxnet_builds as builds\n"
                    "from mxbench.stages import run_stage\n"
                    "from mxbench_train.telemetry import summarise as summarise_gpus\n"  # a function: allowed
                    "from numpy import linalg as la\n")
    assert imports_under_another_name(fake) == ["fake.py:1: mxbench.stages.pipeline as stages",
                                                "fake.py:2: mxbench.builds.mxnet_builds as builds"]


@pytest.mark.parametrize("module", sorted(p.stem for p in TRAINER.glob("*.py")
                                          if p.stem not in TRAINING_ONLY | {"__init__"}))
def test_the_trainers_shared_modules_import_only_the_standard_library(module):
    # -S: no site-packages at all, so any third-party import fails here
    code = f"import sys; sys.path.insert(0, {str(REPO / 'tasks')!r}); import mxbench_train.{module}"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


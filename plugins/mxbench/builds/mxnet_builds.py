"""MXNet builds: which MXNet a DAG run measures, and one cached training environment per build.

``config/mxnet-builds.json`` lists the builds in date order; a date (a DAG run's data interval
start) measures the last build whose ``since`` is on or before it, so a backfill over dates
measures the MXNet versions that were current then, and the same interval always measures the
same build. Each build gets its own venv under ``$MXBENCH_HOME/envs``, made on first use from
the same Python as the training env and cached (beyond ``MXBENCH_KEEP_BUILDS``, the least
recently used are pruned: ``mxbench.builds.venv_and_data_caches``); the pinned build (``requirements-train.txt``)
is the training env itself. A wheel fetched over the network must carry its ``#sha256=``.

A build may name the MXNet ``commit`` it was built from (the results store records it). Such an
entry must say how to get that build: a wheel (``package`` a URL or a local path to a ``.whl``)
with its ``sha256`` field, checked before anything is installed, or an ``image`` built from
``docker/train-source.Dockerfile`` at that commit (tag ``...:src-<commit>``), which only pods run.
No Airflow import: the DAG's tasks, the CLI and tests use this.
"""
import bisect
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from mxbench import config
from mxbench.builds import venv_and_data_caches
from mxbench_train import host_build, json_input
from mxbench_train.errors import MxbenchError
from mxbench_train.host_build import DIRECT_REFERENCE, last_error_lines
from mxbench_train.redaction import redact


def _shipped_or_checkout(relative: str) -> Path:
    """A repository file: the copy an installed wheel ships beside this module (setup.py), else the checkout's."""
    shipped = Path(__file__).resolve().parent / Path(relative).name
    return shipped if shipped.is_file() else config.REPO / relative


MANIFEST = _shipped_or_checkout("config/mxnet-builds.json")
REQUIREMENTS = _shipped_or_checkout("requirements-train.txt")
# the trainer's source, which build venvs import from the checkout (a .pth file); None where mxbench runs from an
# installed wheel, with no checkout: each build venv then gets its own copy of the installed trainer, as on SSH hosts
TRAINER: Optional[Path] = config.REPO / "tasks" if (config.REPO / "tasks" / "mxbench_train").is_dir() else None
STAMP = host_build.STAMP  # one venv maker for both sides (host_build): its stamp, digest, runner and check
ENV_FORMAT = 1  # bump when the way a venv is made changes: every cached venv is then remade

# mxnet==1.9.0, mxnet-cu112==1.9.1, or a wheel: mxnet @ file:///wheels/mxnet-1.9.1-py3-none-any.whl,
# mxnet @ https://host/mxnet-1.9.1-py3-none-any.whl#sha256=<64 hex digits> (see url_problem)
_PINNED = re.compile(r"(?P<name>mxnet(?:-[a-z0-9]+)?)==(?P<version>[0-9][0-9A-Za-z.+!-]*)")
_WHEEL = re.compile(r"(?P<name>mxnet(?:-[a-z0-9]+)?) @ (?P<url>\S+/(?P<file>[^/\s?#]+\.whl)(?:\?[^\s#]*)?(?:#\S*)?)")
_SHA256 = re.compile(r"sha256=[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FIELDS = {"since", "package", "image", "commit", "note", "pins", "sha256"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
# the tag docker/train-source.Dockerfile documents: mxbench-train:src-<sha>
_SOURCE_TAG = re.compile(r".+:src-(?P<commit>[0-9a-f]{7,40})")
_REQUIRED = ("since", "package", "image")


class ManifestError(MxbenchError):
    """The versions manifest is missing, malformed, or has no build for a date."""


@dataclasses.dataclass(frozen=True)
class Build:
    """One MXNet build of the manifest. ``pins`` override lines of ``requirements-train.txt``
    (by project name) for this build only, e.g. ``("numpy==1.23.5",)``."""

    since: dt.date
    package: str
    image: str
    commit: Optional[str] = None
    note: str = ""
    pins: Tuple[str, ...] = ()
    sha256: Optional[str] = None  # of the wheel ``package`` names: checked before it is installed

    @property
    def distribution(self) -> str:
        """``mxnet``, ``mxnet-cu112``, ...: the pip project the build installs."""
        return _parse_package(self.package)[0]

    @property
    def version(self) -> str:
        """``1.9.0`` for ``mxnet==1.9.0``; a wheel's version from its file name."""
        return _parse_package(self.package)[1]

    @property
    def source_only(self) -> bool:
        """A commit with no wheel: only its source-built image (pods) can run it."""
        return bool(self.commit) and not DIRECT_REFERENCE.match(self.package)

    def __str__(self) -> str:
        at = f", commit {self.commit}" if self.commit else ""
        return f"{redact(self.package)} (since {self.since}{at})"


def url_problem(requirement: str) -> Optional[str]:
    """Why pip may not install ``requirement`` (a build's package or a pin), or None.

    An index pin (``mxnet==1.9.1``) is pip's usual business, and a ``file://`` wheel the
    administrator's own file. A wheel fetched over the network must name its bytes,
    ``URL#sha256=<64 lowercase hex digits>``, which pip then checks: over plain http anyone on the
    path can swap it, and https vouches for the server, not the file (a re-uploaded wheel would
    change what a date measures). Other schemes (``git+https``, a bare path) are refused."""
    direct = DIRECT_REFERENCE.match(requirement)
    if not direct:
        return None
    url = direct["url"]
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return None
    if parts.scheme not in ("http", "https"):
        return (f"{redact(url)}: a wheel must be a file://, https:// or http:// URL, "
                f"not {parts.scheme + '://' if parts.scheme else 'a bare path'}")
    if not _SHA256.fullmatch(parts.fragment):
        why = ("anyone on the path can swap it" if parts.scheme == "http"
               else "https vouches for the server, not the file")
        return (f"{redact(url)} is fetched over {parts.scheme} without #sha256=<64 lowercase hex digits> "
                f"({why}); add the wheel's SHA-256 (sha256sum FILE) to the URL")
    return None


def check_sources(build: "Build", spec: Sequence[str]) -> None:
    """Refuse, naming the build, an install spec with a wheel that ``url_problem`` refuses."""
    for requirement in spec:
        problem = url_problem(requirement)
        if problem:
            raise MxbenchError(f"refusing to install MXNet build {build}: {problem}")


def check_wheel(build: "Build") -> None:
    """Refuse, naming the build, a local wheel whose bytes are not the manifest's ``sha256`` (a
    network wheel's ``#sha256=`` pip checks as it downloads)."""
    direct = DIRECT_REFERENCE.match(build.package)
    if not (build.sha256 and direct):
        return
    parts = urllib.parse.urlsplit(direct["url"])
    if parts.scheme != "file":
        return
    path = Path(urllib.parse.unquote(parts.path))
    digest = _file_sha256(build, path)
    if digest != build.sha256:
        raise MxbenchError(f"refusing to install MXNet build {build}: its wheel {path} has SHA-256 "
                           f"{digest}, the manifest says {build.sha256} (a changed or wrong file)")


def _file_sha256(build: "Build", path: Path) -> str:
    try:
        return host_build.file_sha256(str(path))
    except OSError as exc:
        raise MxbenchError(f"refusing to install MXNet build {build}: cannot read its wheel {path}: "
                           f"{exc.strerror or exc}") from None


def wheel_digest(build: "Build") -> Optional[str]:
    """The SHA-256 of the wheel ``build`` installs, which its venv is keyed by: the manifest's ``sha256`` where
    given, else ``host_build.wheel_digest`` (the URL's ``#sha256=``, or a local wheel file's bytes, hashed on every
    call). None for an index pin (pip checks it against the index)."""
    if build.sha256 and DIRECT_REFERENCE.match(build.package):
        return build.sha256
    try:
        return host_build.wheel_digest(build.package)
    except OSError as exc:
        raise MxbenchError(f"refusing to install MXNet build {build}: cannot read its wheel {exc.filename}: "
                           f"{exc.strerror or exc}") from None


def _parse_package(package: str) -> Tuple[str, str]:
    pinned = _PINNED.fullmatch(package)
    if pinned:
        return pinned["name"], pinned["version"]
    wheel = _WHEEL.fullmatch(package)
    if wheel:
        parts = wheel["file"].split("-")
        if len(parts) >= 5 and parts[0].replace("_", "-") == wheel["name"]:
            return wheel["name"], parts[1]
    raise ValueError(f"package {redact(package)!r} is neither mxnet[-VARIANT]==VERSION nor "
                     "mxnet[-VARIANT] @ URL-of-a-wheel (name-version-python-abi-platform.whl)")


def _requirement_name(requirement: str) -> str:
    match = _REQUIREMENT_NAME.match(requirement.strip())
    if not match:
        raise ValueError(f"{redact(requirement)!r} is not a requirement")
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _local_wheel(package: str, folder: Path) -> str:
    """A bare path to a wheel (relative to the manifest's folder) as the direct reference pip takes,
    ``mxnet @ file:///abs/mxnet-1.9.1-...whl``; any other package as it is."""
    if " @ " in package or not package.endswith(".whl") or "://" in package:
        return package
    path = (folder / package).resolve()
    return f"{path.name.split('-')[0].replace('_', '-').lower()} @ {path.as_uri()}"


def _wheel_source(label: str, package: str, sha256, commit, image: str) -> Tuple[str, Optional[str]]:
    """The package (a network wheel with ``#sha256=`` from the field) and sha256 of an entry,
    checked: the field belongs to a wheel and agrees with its URL; a commit says how to get it."""
    direct = DIRECT_REFERENCE.match(package)
    if sha256 is not None:
        if not (isinstance(sha256, str) and _HEX64.fullmatch(sha256)):
            raise ManifestError(f"{label}: sha256 must be the wheel's SHA-256, 64 lowercase hex digits "
                                f"(sha256sum FILE), not {sha256!r}")
        if not direct:
            raise ManifestError(f"{label}: sha256 is for a wheel; package {redact(package)!r} is an index pin, "
                                "which pip checks against the index")
        parts = urllib.parse.urlsplit(direct["url"])
        if parts.fragment and parts.fragment != f"sha256={sha256}":
            raise ManifestError(f"{label}: the package URL's #{parts.fragment[:20]}... differs from its sha256 field")
        if parts.scheme in ("http", "https") and not parts.fragment:  # pip checks the download against it
            package += f"#sha256={sha256}"
    if commit and direct and sha256 is None:
        raise ManifestError(f"{label}: a build of commit {commit} from a wheel needs the wheel's sha256 field "
                            "(sha256sum FILE): it is checked before the wheel is installed")
    if commit and not direct:
        if not image_names_commit(image, commit):
            raise ManifestError(f"{label}: commit {commit} has no wheel (package {redact(package)!r} is an index pin), "
                                f"so its image must be built from docker/train-source.Dockerfile at that commit, "
                                f"tagged ...:src-{commit}, not {image!r}; or give a wheel (URL or path) and its sha256")
    return package, sha256


def image_names_commit(image: Optional[str], commit: str) -> bool:
    """Whether ``image`` is tagged ``...:src-<sha>`` (docker/train-source.Dockerfile) with ``sha``
    that commit (either one a prefix of the other)."""
    tag = _SOURCE_TAG.fullmatch(image or "")
    return bool(tag) and (commit.startswith(tag["commit"]) or tag["commit"].startswith(commit))


def _entry(raw, index: int, where: str) -> Build:
    label = f"{where}: entry {index}"
    if not isinstance(raw, dict):
        raise ManifestError(f"{label}: expected an object with since, package, image, not {type(raw).__name__}")
    if isinstance(raw.get("package"), str):
        label += f" ({redact(raw['package'])})"
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ManifestError(f"{label}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    missing = [key for key in _REQUIRED if not raw.get(key)]
    if missing:
        raise ManifestError(f"{label}: missing {', '.join(missing)}")
    for key in ("since", "package", "image"):
        if not isinstance(raw[key], str):
            raise ManifestError(f"{label}: {key} must be a string, not {raw[key]!r}")
    package = _local_wheel(raw["package"], Path(where).parent)
    try:
        since = dt.date.fromisoformat(raw["since"])
    except ValueError:
        raise ManifestError(f"{label}: since {raw['since']!r} is not a date (YYYY-MM-DD)") from None
    try:
        _parse_package(package)
    except ValueError as exc:
        raise ManifestError(f"{label}: {exc}") from None
    commit = raw.get("commit")
    if commit is not None and not (isinstance(commit, str) and _COMMIT.fullmatch(commit)):
        raise ManifestError(f"{label}: commit must be null or a git sha (7 to 40 lowercase hex digits), "
                            f"not {commit!r}")
    package, sha256 = _wheel_source(label, package, raw.get("sha256"), commit, raw["image"])
    problem = url_problem(package)
    if problem:
        raise ManifestError(f"{label}: package: {problem}")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise ManifestError(f"{label}: note must be a string, not {note!r}")
    pins = raw.get("pins", [])
    if not isinstance(pins, list) or not all(isinstance(p, str) and p.strip() for p in pins):
        raise ManifestError(f"{label}: pins must be a list of requirement strings, not {pins!r}")
    for pin in pins:
        try:
            name = _requirement_name(pin)
        except ValueError as exc:
            raise ManifestError(f"{label}: pins: {exc}") from None
        if name.startswith("mxnet"):
            raise ManifestError(f"{label}: pins: {redact(pin)!r} names MXNet itself; that is the package field")
        problem = url_problem(pin)
        if problem:
            raise ManifestError(f"{label}: pins: {problem}")
    return Build(since=since, package=package, image=raw["image"], commit=commit, note=note,
                 pins=tuple(p.strip() for p in pins), sha256=sha256)


def load_manifest(path: Union[str, Path, None] = None) -> List[Build]:
    """The manifest's builds, validated: a non-empty JSON list, ``since`` strictly increasing.
    Raises ManifestError naming the file and the entry."""
    path = Path(path) if path is not None else MANIFEST
    try:
        raw = json_input.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"MXNet versions manifest {path} does not exist") from None
    except OSError as exc:
        raise ManifestError(f"cannot read MXNet versions manifest {path}: {exc}") from None
    except ValueError as exc:
        raise ManifestError(f"MXNet versions manifest {path} is not JSON: {exc}") from None
    if not isinstance(raw, list) or not raw:
        raise ManifestError(f"MXNet versions manifest {path}: expected a non-empty JSON list of builds")
    builds = [_entry(item, i, str(path)) for i, item in enumerate(raw)]
    for i in range(1, len(builds)):
        if builds[i].since <= builds[i - 1].since:
            earlier = builds[i - 1]
            raise ManifestError(f"{path}: entry {i} ({redact(builds[i].package)}): since {builds[i].since} is not "
                                f"after entry {i - 1}'s ({redact(earlier.package)}, since {earlier.since}); "
                                "the list is ordered by date, one build per date")
    return builds


def _as_date(when: Union[dt.date, dt.datetime, str]) -> dt.date:
    if isinstance(when, str):
        text = when.strip()
        try:
            when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise ManifestError(f"{when!r} is not a date or an ISO datetime") from None
    if isinstance(when, dt.datetime):  # an aware one (a data interval start) counts in UTC
        return (when.astimezone(dt.timezone.utc) if when.tzinfo else when).date()
    if isinstance(when, dt.date):
        return when
    raise ManifestError(f"expected a date, a datetime or an ISO string, not {type(when).__name__} {when!r}")


def build_for(when: Union[dt.date, dt.datetime, str], builds: Optional[Sequence[Build]] = None) -> Build:
    """The build a date measures: the last one whose ``since`` is on or before it (UTC date of an
    aware datetime). A date before the first build raises ManifestError naming the date."""
    builds = list(builds) if builds is not None else load_manifest()
    if not builds:
        raise ManifestError("no MXNet builds to choose from")
    day = _as_date(when)
    at = bisect.bisect_right([b.since for b in builds], day)
    if at == 0:
        raise ManifestError(f"no MXNet build for {day}: the versions manifest starts at {builds[0].since} "
                            f"({redact(builds[0].package)}); add an earlier entry to measure that date")
    return builds[at - 1]


# --- training environments -------------------------------------------------------------------

def requirement_lines(path: Union[str, Path, None] = None) -> List[str]:
    """``requirements-train.txt`` without comments and blank lines."""
    lines = []
    for line in Path(path or REQUIREMENTS).read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def install_spec(build: Build, requirements: Union[str, Path, None] = None) -> List[str]:
    """What pip installs for ``build``: its package, then every other line of
    ``requirements-train.txt`` (never its ``mxnet`` line), a pin of the build replacing the line
    of the same project."""
    pins = {_requirement_name(p): p for p in build.pins}
    spec = [build.package]
    for line in requirement_lines(requirements):
        name = _requirement_name(line)
        if name.startswith("mxnet"):
            continue
        spec.append(pins.pop(name, line))
    return spec + list(pins.values())


def is_pinned(build: Build, requirements: Union[str, Path, None] = None) -> bool:
    """The build ``requirements-train.txt`` pins, with no pins of its own: the training env is it."""
    mxnet_lines = [line for line in requirement_lines(requirements) if _requirement_name(line) == "mxnet"]
    return not build.pins and [build.package.replace(" ", "")] == [line.replace(" ", "") for line in mxnet_lines]


def base_python(train: Optional[str] = None) -> str:
    """The interpreter the training env was made from (its ``pyvenv.cfg``), which makes every
    build's venv; the training python itself when it is no venv (an image's interpreter)."""
    train = Path(train or config.train_env_python())
    cfg = train.parent.parent / "pyvenv.cfg"
    if cfg.is_file():
        values = {}
        for line in cfg.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip().lower()] = value.strip()
        candidates = [values.get("executable"), values.get("base-executable")]
        home, version = values.get("home"), values.get("version") or values.get("version_info") or ""
        if home:
            short = ".".join(version.split(".")[:2])
            candidates += [str(Path(home) / f"python{short}") if short else None,
                           str(Path(home) / "python3"), str(Path(home) / "python")]
        for candidate in candidates:
            if candidate and os.access(candidate, os.X_OK):
                return candidate
        raise MxbenchError(f"cannot find the Python the training env was made from: {cfg} names "
                           f"{[c for c in candidates if c]}, none of which exists")
    if train.exists():
        return str(train)
    raise MxbenchError(f"the training env's python {train} does not exist: run scripts/setup.sh "
                       "(or set MXBENCH_TRAIN_PYTHON)")


def env_dir(build: Build, root: Union[str, Path, None] = None, base: Optional[str] = None,
            digest: Optional[str] = None) -> Path:
    """``<root>/<distribution>-<version>-<hash>``, root defaulting to ``$MXBENCH_HOME/envs``; the
    hash covers the install spec, the base Python and the wheel's SHA-256 (``wheel_digest``, or
    ``digest`` where the caller has it), so a changed pin, a corrected sha256 or a rebuilt wheel at
    the same path makes a new venv."""
    root = Path(root) if root is not None else config.home() / "envs"
    # a copied trainer keys the venv by its files: a new mxbench_train is a new venv
    trainer = str(TRAINER) if TRAINER is not None else f"copy of {host_build.trainer_digest()}"
    fields = {"format": ENV_FORMAT, "spec": install_spec(build), "base": base or base_python(), "trainer": trainer}
    digest = digest or wheel_digest(build)
    if digest:  # an index pin's key stays as it was: its venvs are not remade
        fields["wheel_sha256"] = digest
    key = json.dumps(fields, sort_keys=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{build.distribution}-{build.version}")
    return root / f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _stamp_ok(venv: Path, spec: List[str], digest: Optional[str] = None) -> bool:
    """Whether ``venv`` is made, of ``spec`` and, for a wheel, of the wheel with SHA-256 ``digest``
    (``host_build.matching_stamp``, the hosts' own check): re-checked on every use."""
    return host_build.matching_stamp(str(venv), spec, digest) is not None


def _run(argv, what: str, build: Build, timeout: float) -> str:
    def failed(why: str) -> MxbenchError:
        return MxbenchError(f"cannot make the training env for MXNet build {build}: {why}")

    return host_build.run_step(argv, what, timeout, failed).stdout


def _create(build: Build, venv: Path, spec: List[str], base: str, pip_timeout: float) -> None:
    """Make the venv from scratch; the stamp, written last, is what marks it done."""
    shutil.rmtree(venv, ignore_errors=True)  # a half venv from a killed build
    started = time.time()
    _run([base, "-m", "venv", str(venv)], f"{base} -m venv", build, 600)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
          *spec], "pip install " + " ".join(map(redact, spec)), build, pip_timeout)
    add_trainer(build, venv, spec)
    version = _run([python, "-c", "import mxnet, mxbench_train; print(mxnet.__version__)"],
                   "import mxnet", build, 300).strip().splitlines()[-1:]
    stamp = {"build": dataclasses.asdict(build) | {"since": str(build.since), "pins": list(build.pins)},
             "spec": spec, "wheel_sha256": wheel_digest(build), "base_python": base,
             "mxnet_version": version[0] if version else None,
             "seconds": round(time.time() - started, 1), "made": dt.datetime.now(dt.timezone.utc).isoformat()}
    host_build.write_stamp(str(venv), stamp)


def add_trainer(build: Build, venv: Path, spec: List[str]) -> None:
    """The trainer into a build venv: the checkout's (``TRAINER``), as `pip install -e tasks/` would without
    writing into tasks/; without a checkout, a copy of the installed one (``host_build.install_trainer``)."""
    if TRAINER is None:
        host_build.install_trainer(str(venv), host_build.BuildSpec(build.package, build.version, spec,
                                                                   build.distribution))
        return
    site = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                "finding site-packages", build, 60).strip()
    (Path(site) / "mxbench-train-checkout.pth").write_text(f"{TRAINER}\n")


def ensure_venv(build: Build, root: Union[str, Path, None] = None, pip_timeout: float = 1800) -> str:
    """The interpreter of ``build``'s training env, made on first use and cached.

    The pinned build (``requirements-train.txt``'s ``mxnet==`` line, no pins) is the training env
    itself: ``config.train_env_python()``. Any other gets ``<root>/<name>/bin/python`` (root:
    ``$MXBENCH_HOME/envs``): a venv from the training env's base Python with ``install_spec(build)``
    and the trainer (``add_trainer``). A stamp file written last (``host_build.write_stamp``, the
    hosts' own) makes it idempotent; a file lock makes concurrent callers (two tasks, two threads)
    wait for one build. A failed build raises MxbenchError naming the build and pip's last error lines and
    leaves no venv behind; a wheel fetched over the network without ``#sha256=`` is refused
    before pip runs (``url_problem``). Each call stamps the venv's use and prunes the other
    build venvs beyond ``MXBENCH_KEEP_BUILDS`` (``venv_and_data_caches``)."""
    if build.source_only:  # installing its release instead would measure the wrong MXNet
        raise MxbenchError(f"MXNet build {build} is built from source: there is no wheel to install here; "
                           f"only its image {build.image} (pods) runs it")
    if is_pinned(build):
        venv_and_data_caches.prune_builds(root)  # the other builds' venvs age all the same
        return config.train_env_python()
    base = base_python()
    spec = install_spec(build)
    check_sources(build, spec)
    digest = wheel_digest(build)
    venv = env_dir(build, root, base, digest)
    python = str(venv / "bin" / "python")
    if not _stamp_ok(venv, spec, digest):
        with venv_and_data_caches.making(venv):
            if not _stamp_ok(venv, spec, digest):  # another caller may have made it while this one waited
                check_wheel(build)  # before pip, and before any venv exists
                try:
                    _create(build, venv, spec, base, pip_timeout)
                except BaseException:
                    shutil.rmtree(venv, ignore_errors=True)
                    raise
    venv_and_data_caches.prune_builds(venv.parent, current=venv)  # stamps this one's use first: it is the newest
    return python


_CHECK = r"""
import json
try:
    import mxnet as mx
except BaseException as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}".strip().splitlines()[0]}))
    raise SystemExit(0)
try:
    from importlib.metadata import version
    v = version("mxnet")
except Exception:
    v = getattr(mx, "__version__", "unknown")
print(json.dumps({"version": v, "module_api": hasattr(getattr(mx, "mod", None), "Module")}))
"""


def unsupported_message(version: str) -> str:
    """The trainer's own words (``mxbench_train.train.require_module_api``)."""
    return f"MXNet {version} is not supported by this trainer: it has no Module API (MXNet 2 removed it)"


def check_trainer(python: str, timeout: float = 300) -> Optional[str]:
    """None when ``python``'s MXNet can run this trainer (it has the Module API); else why not:
    an MXNet without the Module API (MXNet 2), or an mxnet that does not import."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    try:
        done = subprocess.run([python, "-c", _CHECK], capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"importing mxnet with {python} took over {timeout:.0f} s"
    except OSError as exc:
        return f"cannot run the training python {python}: {exc}"
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return (f"cannot check MXNet with {python} (exit {done.returncode}): "
                f"{last_error_lines(done.stderr + done.stdout, 1)}")
    if "error" in result:
        return f"cannot import mxnet with {python}: {result['error']}"
    if not result.get("module_api"):
        return unsupported_message(result.get("version", "unknown"))
    return None

"""The one shape of the MXNet build a DAG run measures, as the DAG hands it around.

``resolve_build`` (the regression DAG) and ``plan_probe`` (the bisect DAG) make a ``RunBuild`` from
the versions manifest's entry (``builds.mxnet_builds.Build``) and hand it on through XCom as a dict
(``to_dict``); the stages and launchers read it back with ``from_dict``. Shown, it never carries a
wheel URL's credentials (``mxbench_train.redaction``). No Airflow, no pandas.
"""
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

from mxbench_train.redaction import redact


@dataclass(frozen=True)
class RunBuild:
    """The MXNet build a run must train with: ``spec`` is what pip installs for it
    (``builds.mxnet_builds.install_spec``), ``python`` its venv on the Airflow worker (the local
    launcher's), ``image`` the versions manifest's image name (which a Kubernetes connection's image
    template may use); ``commit`` and ``since`` name its manifest entry, ``unsupported`` why the
    local runs cannot train it, ``label`` the bisect DAG's name for its probe."""

    package: str  # mxnet==1.9.0
    version: str  # 1.9.0
    spec: Tuple[str, ...] = ()
    python: Optional[str] = None
    image: Optional[str] = None
    commit: Optional[str] = None
    since: Optional[str] = None
    unsupported: Optional[str] = None
    label: Optional[str] = None

    @classmethod
    def of(cls, entry, spec=(), **more) -> "RunBuild":
        """The record of a versions manifest entry (a ``builds.mxnet_builds.Build``)."""
        return cls(entry.package, entry.version, tuple(spec or ()), image=entry.image, commit=entry.commit,
                   since=str(entry.since), **more)

    @classmethod
    def from_dict(cls, record: Optional[dict]) -> Optional["RunBuild"]:
        """The build an XCom value or a run's ``build`` names; None when there is none."""
        if not record or not record.get("package"):
            return None
        return cls(record["package"], record.get("version") or "", tuple(record.get("spec") or ()),
                   record.get("python"), record.get("image"), record.get("commit"), record.get("since"),
                   record.get("unsupported"), record.get("label"))

    def to_dict(self) -> dict:
        """For XCom and run folders (JSON): a list for the spec; ``label`` only where there is one
        (the bisect DAG's)."""
        record = {**asdict(self), "spec": list(self.spec)}
        if record["label"] is None:
            del record["label"]
        return record

    def __str__(self):  # a wheel URL's user and password never shown
        return f"MXNet build {redact(self.package)}"

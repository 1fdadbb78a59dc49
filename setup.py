"""setuptools reads pyproject.toml; this adds the one thing it cannot say there: files outside the package that an
installed mxbench needs, copied into it when a wheel is built. ``dags/*.py`` go to ``mxbench/dags`` (a deployment's
dags folder: ``mxbench dags-folder``), the versions manifest and the training requirements to ``mxbench/builds``
(``builds.mxnet_builds`` reads the checkout's own files where there is a checkout). An editable install needs none of
this: it runs from the checkout."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = {"dags": ["dags/*.py"], "builds": ["config/mxnet-builds.json", "requirements-train.txt"]}


class BuildWithRepositoryFiles(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        for folder, patterns in SHIPPED.items():
            for pattern in patterns:
                sources = sorted(HERE.glob(pattern))
                if not sources:
                    raise FileNotFoundError(f"mxbench: nothing matches {pattern} in {HERE} to ship in the package")
                for source in sources:
                    target = Path(self.build_lib, "mxbench", folder, source.name)
                    self.mkpath(str(target.parent))
                    self.copy_file(str(source), str(target))


# setuptools writes its egg-info beside the packages, here plugins/: Airflow puts the plugins folder on sys.path,
# where that metadata would be a second mxbench distribution, its airflow.plugins entry point a second plugin
EGG_BASE = HERE / "build"
EGG_BASE.mkdir(exist_ok=True)
setup(cmdclass={"build_py": BuildWithRepositoryFiles}, options={"egg_info": {"egg_base": str(EGG_BASE)}})

"""The "Running it for real" steps (docs/running.md) work from nothing, in the order given."""
import os
import re
import subprocess

import pytest

from conftest import REPO


def running_it_for_real_steps():
    page = (REPO / "docs" / "running.md").read_text()
    section = page.split("# Running it for real", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


@pytest.mark.slow
def test_running_it_for_real_steps_work_on_a_new_home(tmp_path):
    steps = running_it_for_real_steps()
    assert steps[-1] == "airflow standalone"
    # everything up to the long-running server, then ask the new home what it has
    script = " && ".join(steps[:-1] + ["airflow pools list -o plain", "airflow dags reserialize",
                                      "airflow dags list -o plain"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MXBENCH"))}
    env["MXBENCH_HOME"] = str(tmp_path / "home")
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(r"^mxbench_local\s+1\b", done.stdout, re.M), done.stdout[-2000:]
    assert re.search(r"^mxbench_benchmark\b", done.stdout, re.M), done.stdout[-2000:]
    assert (tmp_path / "home" / "airflow" / "airflow.db").is_file()

"""The role plan: a pure function, tested without processes."""
import pytest

from mxbench_train.role_plan import Job, Role, plan_roles, threads_per_process


def test_dist_sync_two_hosts_plan_wires_every_role_to_the_scheduler():
    job = Job(trainer_args=("--batch-size", "512", "--gpus", "0,1,2,3"), kvstore="dist_sync", workers=2,
              hosts=("127.0.0.1", "127.0.0.2"), port=9500, python="/opt/py", cores_per_host=8)
    plan = plan_roles(job)
    assert [r.name for r in plan] == ["scheduler", "server-0", "server-1", "worker-0", "worker-1"]
    assert [r.host for r in plan] == ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"]
    for role in plan:
        assert role.env["DMLC_ROLE"] == role.kind
        assert role.env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
        assert role.env["DMLC_PS_ROOT_PORT"] == "9500"
        assert role.env["DMLC_NUM_WORKER"] == "2" and role.env["DMLC_NUM_SERVER"] == "2"
        assert role.env["DMLC_NODE_HOST"] == role.host
    workers = [r for r in plan if r.kind == "worker"]
    assert all(r.argv == ("/opt/py", "-m", "mxbench_train", "train", "--batch-size", "512", "--gpus", "0,1,2,3")
               for r in workers)
    assert all(r.env["OMP_NUM_THREADS"] == "8" for r in workers)  # one worker per host
    assert plan[0].argv == ("/opt/py", "-m", "mxbench_train", "serve")


def test_workers_sharing_a_host_share_its_cores():
    plan = plan_roles(Job(trainer_args=(), kvstore="dist_sync", workers=4, servers=1, cores_per_host=2))
    assert [r.env["OMP_NUM_THREADS"] for r in plan if r.kind == "worker"] == ["1"] * 4
    assert sum(r.kind == "server" for r in plan) == 1
    assert threads_per_process(16, 3) == 5 and threads_per_process(2, 8) == 1


def test_local_kvstore_is_one_worker_without_dmlc_env():
    (role,) = plan_roles(Job(trainer_args=("--kv-store", "device"), kvstore="device", cores_per_host=4,
                             env={"PYTHONPATH": "/x"}))
    assert role.kind == "worker" and not any(k.startswith("DMLC_") for k in role.env)
    assert role.env == {"PYTHONPATH": "/x", "OMP_NUM_THREADS": "4"}


def test_plan_round_trips_through_json_dicts():
    plan = plan_roles(Job(trainer_args=("--lr", "0.1"), kvstore="dist_async", workers=2))
    assert [Role.from_dict(r.to_dict()) for r in plan] == plan


@pytest.mark.parametrize("job, message", [
    (Job(trainer_args=(), kvstore="dist_foo"), "unknown kvstore 'dist_foo'"),
    (Job(trainer_args=(), kvstore="local", workers=2), r"use a dist_\* kvstore"),
    (Job(trainer_args=(), kvstore="dist_sync", workers=0), "workers must be at least 1"),
    (Job(trainer_args=(), kvstore="dist_sync", hosts=()), "at least one host"),
])
def test_bad_jobs_are_refused_with_the_cause(job, message):
    with pytest.raises(ValueError, match=message):
        plan_roles(job)


def test_each_host_runs_its_own_interpreter():
    """SSH hosts may keep the training env in different places: the plan says which runs where."""
    job = Job(trainer_args=(), kvstore="dist_sync", workers=2, hosts=("10.0.0.1", "10.0.0.2"),
              python="python3", pythons={"10.0.0.2": "/opt/train/bin/python"})
    by_host = {(r.name, r.host): r.argv[0] for r in plan_roles(job)}
    assert by_host == {("scheduler", "10.0.0.1"): "python3", ("server-0", "10.0.0.1"): "python3",
                       ("server-1", "10.0.0.2"): "/opt/train/bin/python", ("worker-0", "10.0.0.1"): "python3",
                       ("worker-1", "10.0.0.2"): "/opt/train/bin/python"}


def test_workers_on_one_host_split_its_gpus_unless_each_has_its_own():
    """Four one-GPU workers on one machine must not all train on GPU 0; in a pod, though, the
    GPUs it was given are 0..k-1."""
    job = Job(trainer_args=(), kvstore="dist_sync", workers=4, hosts=("h1",), gpus_per_worker=1)

    def gpus(plan):
        return [r.argv[r.argv.index("--gpus") + 1] for r in plan if r.kind == "worker"]

    assert gpus(plan_roles(job)) == ["0", "1", "2", "3"]
    two_hosts = Job(trainer_args=(), kvstore="dist_sync", workers=4, hosts=("h1", "h2"), gpus_per_worker=2)
    assert gpus(plan_roles(two_hosts)) == ["0,1", "0,1", "2,3", "2,3"]  # h1, h2, h1, h2
    pods = Job(trainer_args=(), kvstore="dist_sync", workers=4, hosts=("h1",), gpus_per_worker=1,
               split_host_gpus=False)
    assert gpus(plan_roles(pods)) == ["0", "0", "0", "0"]
    assert "--gpus" not in plan_roles(Job(trainer_args=(), kvstore="local"))[0].argv  # CPU

"""Params -> variants -> runs: presets, the trigger form's schema, the up-front fit check."""
import jsonschema
import pytest

from mxbench.variants import (
    PARAMS_SCHEMA,
    SEED_REFERENCE,
    Target,
    VariantError,
    check_fits,
    cpu_demo_preset,
    expand_runs,
    preset,
    seed_preset,
    select_variants,
)

NO_GPU = {"local": Target("local", hosts=1, gpus_per_host=0)}
LOCAL = {"local": Target("local", hosts=1, gpus_per_host=0, one_machine=True)}
BIG = {"local": Target("local", hosts=2, gpus_per_host=8)}


def defaults(**overrides):
    return {**{name: spec["default"] for name, spec in PARAMS_SCHEMA.items()}, **overrides}


def schema():
    return {"type": "object", "properties": {k: {f: v for f, v in spec.items() if f not in ("section",)}
                                             for k, spec in PARAMS_SCHEMA.items()}}


def test_seed_preset_is_the_study_table():
    variants = preset("seed")
    assert [(v.devices, v.batch_size * v.workers) for v in variants] == [
        (1, 128), (1, 256), (2, 256), (4, 512), (8, 1024), (8, 1024)]
    two_hosts = variants[-1]
    assert two_hosts.kvstore == "dist_sync" and two_hosts.hosts == 2 and two_hosts.batch_per_device == 128
    assert all(v.num_layers == 110 and v.epochs == 300 for v in variants)
    assert set(SEED_REFERENCE) == {v.id for v in variants}


def test_cpu_demo_has_one_two_and_four_workers_at_two_batch_sizes():
    variants = preset("cpu-demo")
    assert sorted({v.workers for v in variants}) == [1, 2, 4]
    assert sorted({v.batch_size for v in variants}) == [32, 64]
    assert all(v.gpus_per_worker == 0 for v in variants)


def test_runs_are_variant_x_launcher_x_repeat_repeat_major():
    runs = expand_runs(defaults(repeats=2), LOCAL)
    assert len(runs) == 7 * 2
    assert [r["repeat"] for r in runs] == [1] * 7 + [2] * 7
    assert len({r["key"] for r in runs}) == 14 and runs[0]["key"] == "cpu1-bs32__local__r1"


def test_overrides_and_variant_selection():
    variants = select_variants(defaults(epochs=1, num_layers=20, only_variants=["cpu2w-bs64"]))
    assert [(v.id, v.epochs, v.num_layers) for v in variants] == [("cpu2w-bs64", 1, 20)]
    with pytest.raises(VariantError, match="only_variants names nope, not in preset 'cpu-demo'"):
        select_variants(defaults(only_variants=["nope"]))


def test_seed_preset_on_a_machine_without_gpus_is_refused_naming_each_variant():
    with pytest.raises(VariantError) as error:
        expand_runs(defaults(preset="seed"), NO_GPU)
    message = str(error.value)
    assert "variant 1gpu-bs128 needs 1 GPUs per host; the local target has 0" in message
    assert "variant 2x4gpu-bs512 needs 2 hosts; the local target has 1" in message
    assert len(expand_runs(defaults(preset="seed", repeats=1), BIG)) == 6


def test_a_launcher_without_a_target_is_refused():
    with pytest.raises(VariantError, match="launcher 'ssh' has no target"):
        expand_runs(defaults(launchers=["ssh"]), NO_GPU)


@pytest.mark.parametrize("bad", [
    {"preset": "huge"}, {"repeats": 0}, {"launchers": []}, {"launchers": ["carrier-pigeon"]},
    {"num_layers": 10}, {"epochs": 0}, {"dataset": "ftp://x/y"}, {"dataset": "rel/path; rm -rf /"},
    {"synthetic_images": 52}, {"only_variants": ["a b"]},
])
def test_schema_refuses_bad_params(bad):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(defaults(**bad), schema())


def test_schema_accepts_the_defaults_and_real_sources():
    for dataset in ("synthetic", "/data/cifar-10-python.tar.gz", "https://example.org/cifar-10-python.tar.gz"):
        jsonschema.validate(defaults(dataset=dataset, num_layers=110, epochs=5), schema())


def test_every_launcher_belongs_to_exactly_one_machine_set():
    from mxbench.launchers import LAUNCHERS as REGISTERED
    from mxbench.variants import LAUNCHERS, MACHINE_SETS, machine_sets

    members = [launcher for launchers in MACHINE_SETS.values() for launcher in launchers]
    assert sorted(members) == sorted(LAUNCHERS) == sorted(REGISTERED)  # none without a task, none run twice
    assert machine_sets({}) == MACHINE_SETS
    # the loopback sshd the demo and tests use is this machine: ssh and local take turns
    assert any({"local", "ssh"} <= set(members) for members in MACHINE_SETS.values())


def test_machine_sets_from_the_environment_are_checked():
    from mxbench.variants import MACHINE_SETS_ENV, machine_sets

    assert machine_sets({MACHINE_SETS_ENV: '{"local": ["local"], "gpu_hosts": ["ssh", "kubernetes"]}'}) == {
        "local": ("local",), "gpu_hosts": ("ssh", "kubernetes")}
    for bad in ('{"local": ["local"]}', '{"local": ["local"], "gpu_hosts": ["ssh"]}',
                '{"a": ["local", "ssh", "kubernetes"], "b": ["ssh"]}', "not json", "[1]",
                '{"bad name": ["local", "ssh"]}'):
        with pytest.raises(VariantError, match="MXBENCH_MACHINE_SETS"):
            machine_sets({MACHINE_SETS_ENV: bad})


def test_local_runs_a_multi_host_variant_on_loopback_addresses_of_one_machine():
    from mxbench.launchers.local import LocalLauncher

    variant = next(v for v in cpu_demo_preset() if v.hosts == 2)
    assert check_fits(variant, Target("local", 1, 0, one_machine=True)) is None
    assert "needs 2 hosts" in check_fits(variant, Target("ssh", 1, 0))
    gpu_variant = seed_preset()[-1]  # 2 machines x 4 GPUs: 8 GPUs on one machine
    assert "needs 8 GPUs" in check_fits(gpu_variant, Target("local", 1, 4, one_machine=True))
    assert check_fits(gpu_variant, Target("local", 1, 8, one_machine=True)) is None
    plan = LocalLauncher().plan(variant, "/data", "/tmp/run")
    assert sorted({r.host for r in plan}) == ["127.0.0.1", "127.0.0.2"]
    assert {r.env["DMLC_NODE_HOST"] for r in plan if r.kind == "worker"} == {"127.0.0.1", "127.0.0.2"}


def test_an_unavailable_launcher_keeps_its_runs_with_the_reason():
    runs = expand_runs({"preset": "cpu-demo", "repeats": 2, "launchers": ["local", "ssh"],
                        "only_variants": ["cpu2h-bs64"]},
                       {"local": Target("local", 1, 0, one_machine=True)},
                       {"ssh": "the ssh target is unavailable: host mxbench_ssh_1 (127.0.0.1): cannot connect"})
    assert [(r["launcher"], r["repeat"], r.get("unavailable", "")[:26]) for r in runs] == [
        ("local", 1, ""), ("ssh", 1, "the ssh target is unavaila"), ("local", 2, ""),
        ("ssh", 2, "the ssh target is unavaila")]


def test_launchers_that_share_machines_alternate_repeat_by_repeat():
    targets = {"ssh": Target("ssh", 1, 0), "kubernetes": Target("kubernetes", 1, 0)}
    runs = expand_runs({"preset": "cpu-demo", "repeats": 3, "launchers": ["ssh", "kubernetes"],
                        "only_variants": ["cpu1-bs32", "cpu2w-bs32"]}, targets)
    one_variant = [(r["launcher"], r["repeat"]) for r in runs if r["variant"]["id"] == "cpu1-bs32"]
    assert one_variant == [("ssh", 1), ("kubernetes", 1), ("ssh", 2), ("kubernetes", 2), ("ssh", 3),
                           ("kubernetes", 3)]


@pytest.mark.parametrize("conn_id", ["$(touch pwned)", "; touch pwned", "`touch pwned`", "a\nb", "a b", ""])
def test_ssh_connection_ids_with_shell_payloads_are_refused_by_the_form(conn_id):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(defaults(ssh_connections=[conn_id]), schema())

"""Params -> variants -> runs: presets, the trigger form's schema, the up-front fit check."""
import jsonschema
import pytest

from mxbench.matrix.params import PARAMS_SCHEMA
from mxbench.matrix.variants import (
    SEED_REFERENCE,
    Target,
    VariantError,
    check_fits,
    cpu_demo_preset,
    expand_runs,
    preset,
    round_order,
    seed_preset,
    select_variants,
)
from mxbench.run_folder import RunFolder

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
    {"contended_replacements": -1}, {"contended_replacements": 26}, {"contended_replacements": 1.5},
    {"contended_replacements": "2"},
])
def test_schema_refuses_bad_params(bad):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(defaults(**bad), schema())


def test_schema_accepts_the_defaults_and_real_sources():
    for dataset in ("synthetic", "/data/cifar-10-python.tar.gz", "https://example.org/cifar-10-python.tar.gz"):
        jsonschema.validate(defaults(dataset=dataset, num_layers=110, epochs=5), schema())


def test_every_launcher_belongs_to_exactly_one_machine_set():
    from mxbench.launchers import LAUNCHERS as REGISTERED
    from mxbench.matrix.variants import LAUNCHERS, MACHINE_SETS, machine_sets

    members = [launcher for launchers in MACHINE_SETS.values() for launcher in launchers]
    assert sorted(members) == sorted(LAUNCHERS) == sorted(REGISTERED)  # none without a task, none run twice
    assert machine_sets({}) == MACHINE_SETS
    # the loopback sshd the demo and tests use is this machine: ssh and local take turns
    assert any({"local", "ssh"} <= set(members) for members in MACHINE_SETS.values())


def test_machine_sets_from_the_environment_are_checked():
    from mxbench.matrix.variants import MACHINE_SETS_ENV, machine_sets

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
    plan = LocalLauncher().plan(variant, "/data", RunFolder("/tmp/run"))
    assert sorted({r.host for r in plan}) == ["127.0.0.1", "127.0.0.2"]
    assert {r.env["DMLC_NODE_HOST"] for r in plan if r.kind == "worker"} == {"127.0.0.1", "127.0.0.2"}


def test_an_unavailable_launcher_keeps_its_runs_with_the_reason():
    runs = expand_runs({"preset": "cpu-demo", "repeats": 2, "launchers": ["local", "ssh"],
                        "only_variants": ["cpu2h-bs64"]},
                       {"local": Target("local", 1, 0, one_machine=True)},
                       {"ssh": "the ssh target is unavailable: host mxbench_ssh_1 (127.0.0.1): cannot connect"})
    assert [(r["launcher"], r["repeat"], r.get("unavailable", "")[:26]) for r in runs] == [
        ("local", 1, ""), ("ssh", 1, "the ssh target is unavaila"), ("ssh", 2, "the ssh target is unavaila"),
        ("local", 2, "")]


def test_launchers_that_share_machines_run_in_counterbalanced_rounds():
    targets = {"ssh": Target("ssh", 1, 0), "kubernetes": Target("kubernetes", 1, 0)}
    runs = expand_runs({"preset": "cpu-demo", "repeats": 4, "launchers": ["ssh", "kubernetes"],
                        "only_variants": ["cpu1-bs32", "cpu2w-bs32"]}, targets)
    one_variant = [(r["launcher"], r["repeat"]) for r in runs if r["variant"]["id"] == "cpu1-bs32"]
    # ABBA, then BAAB: each round alternates, and each launcher goes first in half the rounds
    assert one_variant == [("ssh", 1), ("kubernetes", 1), ("kubernetes", 2), ("ssh", 2), ("kubernetes", 3),
                           ("ssh", 3), ("ssh", 4), ("kubernetes", 4)]
    assert [(r["round"], r["position"]) for r in runs if r["variant"]["id"] == "cpu1-bs32"] == [
        (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (4, 1), (4, 2)]
    assert runs[0]["key"] == "cpu1-bs32__ssh__r1" and runs[4]["key"] == "cpu1-bs32__kubernetes__r2"


def mean_positions(order):
    return {launcher: sum(round_.index(launcher) for round_ in order) / len(order) for launcher in order[0]}


def test_a_linear_drift_cancels_from_every_pair_every_two_rounds():
    for launchers in (["a", "b"], ["a", "b", "c"]):
        for first in range(1, 12, 2):
            two_rounds = [round_order(launchers, first), round_order(launchers, first + 1)]
            assert len(set(mean_positions(two_rounds).values())) == 1, two_rounds


def test_three_launchers_in_six_rounds_are_a_williams_latin_square():
    square = [round_order(["a", "b", "c"], r) for r in range(1, 7)]
    assert square == [list("abc"), list("cba"), list("bca"), list("acb"), list("cab"), list("bac")]
    for position in range(3):  # each launcher in each position twice
        assert sorted(row[position] for row in square) == sorted("aabbcc")
    followers = [(row[i], row[i + 1]) for row in square for i in range(2)]
    assert all(followers.count(pair) == 2 for pair in set(followers)) and len(set(followers)) == 6
    assert round_order(["kubernetes"], 3) == ["kubernetes"]


def test_a_variant_runs_only_its_own_launchers_in_counterbalanced_order():
    targets = {"local": Target("local", 2, 0, one_machine=True), "ssh": Target("ssh", 2, 0),
               "kubernetes": Target("kubernetes", 2, 0, host_network=True)}
    runs = expand_runs({"preset": "cpu-demo", "repeats": 2, "launchers": ["local", "ssh", "kubernetes"],
                        "only_variants": ["cpu2h-bs64", "cpu2h-bs64-hostnet"]}, targets)
    twin = "cpu2h-bs64-hostnet"
    assert [(r["variant"]["id"], r["launcher"], r["position"]) for r in runs] == [
        ("cpu2h-bs64", "local", 1), ("cpu2h-bs64", "ssh", 2), ("cpu2h-bs64", "kubernetes", 3), (twin, "kubernetes", 1),
        ("cpu2h-bs64", "kubernetes", 1), ("cpu2h-bs64", "ssh", 2), ("cpu2h-bs64", "local", 3), (twin, "kubernetes", 1)]


def test_rounds_beyond_repeats_up_to_the_budget_are_optional():
    runs = expand_runs(defaults(repeats=6, max_repeats=9, target_gap=0.05, launchers=["local"],
                                only_variants=["cpu1-bs32"]), LOCAL)
    # beyond max_repeats, the contended rounds' own replacement budget (default: half of max_repeats)
    assert [(r["round"], r["optional"]) for r in runs] == [(r, r > 6) for r in range(1, 14)]
    assert [r["optional"] for r in expand_runs(defaults(repeats=2), LOCAL)] == [False] * 14  # no budget: none
    assert len(expand_runs(defaults(repeats=2, contended_replacements=1), LOCAL)) == 21  # replacements alone
    with pytest.raises(VariantError, match="contended_replacements must be a whole number"):
        expand_runs(defaults(repeats=6, contended_replacements=-1), LOCAL)
    with pytest.raises(VariantError, match=r"max_repeats \(4\) is below repeats \(6\)"):
        expand_runs(defaults(repeats=6, max_repeats=4), LOCAL)
    with pytest.raises(VariantError, match="needs a target_gap"):
        expand_runs(defaults(repeats=6, max_repeats=8, target_gap=None), LOCAL)


def test_the_form_says_the_rounds_a_verdict_needs_from_the_rule():
    from mxbench.stats.floors import repeats_needed, rounds_needed, smallest_paired_p

    assert rounds_needed() == 6 and smallest_paired_p(5) == 0.0625 and smallest_paired_p(6) < 0.05
    assert repeats_needed() == 4 and rounds_needed(0.01) == 8
    assert "at least 6 rounds" in PARAMS_SCHEMA["repeats"]["description"]
    assert "4 a side" in PARAMS_SCHEMA["repeats"]["description"]
    jsonschema.validate(defaults(max_repeats=12, target_gap=0.05), schema())
    for bad in ({"max_repeats": 0}, {"max_repeats": 51}, {"target_gap": 0}, {"target_gap": 0.9},
                {"target_gap": "5%"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(defaults(**bad), schema())


@pytest.mark.parametrize("conn_id", ["$(touch pwned)", "; touch pwned", "`touch pwned`", "a\nb", "a b", ""])
def test_ssh_connection_ids_with_shell_payloads_are_refused_by_the_form(conn_id):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(defaults(ssh_connections=[conn_id]), schema())

"""Benchmark variants: the presets, machine sets, round order, and params -> runs (the forms: ``params``).

A *variant* is one setup of the seed study's table (devices, batch size,
kvstore, hosts); a *run* is one variant under one launcher, one repeat. Pure
functions, no Airflow: the DAG maps over what ``expand_runs`` returns.
"""
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

from mxbench.stats.floors import rounds_needed
from mxbench_train import json_input

LAUNCHERS = ("local", "ssh", "kubernetes")
# Launchers whose runs share machines, by machine set: they share one Airflow pool
# (``mxbench_<set>``, one slot) and one mapped task, so their runs never overlap and their
# repeats run in counterbalanced rounds (``round_order``). Launchers on disjoint machines go in
# different sets and run in parallel.
# By default the ssh hosts are this machine's loopback sshd and the Kubernetes nodes the local
# stand-in's (the demo's): one set. The seed's k8s-vs-ssh study ran both on the same GPU machines,
# which is one set too.
MACHINE_SETS = {"local": ("local", "ssh", "kubernetes")}
MACHINE_SETS_ENV = "MXBENCH_MACHINE_SETS"  # e.g. {"local": ["local"], "gpu_hosts": ["ssh", "kubernetes"]}
DEFAULT_SSH_CONNECTIONS = ("mxbench_ssh_1", "mxbench_ssh_2")
DEFAULT_KUBERNETES_CONNECTION = "mxbench_kubernetes"
DEPTHS = (8, 14, 20, 32, 44, 56, 110)  # CIFAR ResNet depths, 6n+2
PRESETS = ("cpu-demo", "cpu-link", "seed", "seed-k8s", "aa-calibration", "convergence")
SLOW_LINK = "slow"  # the cpu-link preset's second link: the name in each ssh connection's mxbench_links
ARM_B = "-b"  # an A/A calibration's second arm of a launcher: local-b runs like local, compared with it
HOST_NETWORK_SUFFIX = "-hostnet"  # a variant's twin that runs its pods with hostNetwork: true
SYNTHETIC = "synthetic"
DEFAULT_TARGET_GAP = 0.05  # the trigger form's (``params``): contended rounds replaced without max_repeats plan none


class VariantError(ValueError):
    """A variant the target cannot run, or params that make no sense together."""


def machine_sets(environ=os.environ) -> Dict[str, Tuple[str, ...]]:
    """The machine sets: ``MXBENCH_MACHINE_SETS`` (JSON) where set, else MACHINE_SETS.

    Read where the DAG is parsed and where pools are made, so both see the same sets.
    Every launcher must be in exactly one set.
    """
    raw = environ.get(MACHINE_SETS_ENV)
    if not raw:
        return dict(MACHINE_SETS)
    try:
        sets = {str(k): tuple(v) for k, v in json_input.loads(raw).items()}
    except (ValueError, AttributeError, TypeError):
        raise VariantError(f"{MACHINE_SETS_ENV} must be a JSON object of set name -> launcher names, "
                           f"got {raw!r}") from None
    placed = [launcher for members in sets.values() for launcher in members]
    bad_names = [k for k in sets if not re.fullmatch(r"[A-Za-z0-9_]+", k)]
    if bad_names or sorted(placed) != sorted(LAUNCHERS):
        raise VariantError(f"{MACHINE_SETS_ENV}: every launcher ({', '.join(LAUNCHERS)}) must be in exactly one "
                           f"set, and set names are letters, digits and _; got {raw!r}")
    return sets


def machine_set_of(launcher: str, sets: Mapping[str, Sequence[str]]) -> str:
    return next(name for name, members in sets.items() if launcher in members)


@dataclass(frozen=True)
class Variant:
    id: str  # stable, file-name safe: also the run folder's prefix
    setup: str  # as the seed's table writes it
    batch_size: int  # per worker, split over its GPUs
    workers: int = 1
    hosts: int = 1
    gpus_per_worker: int = 0  # 0: the worker trains on the CPU
    kvstore: str = "device"
    num_layers: int = 110
    epochs: int = 300
    disp_batches: int = 20
    host_network: bool = False  # Kubernetes only: pods on the node's network, not the pod network
    launchers: Tuple[str, ...] = ()  # the only launchers it runs under; empty: every chosen one
    link: str = ""  # ssh: the hosts' link its roles talk over, by its name in mxbench_links; "": their default

    @property
    def devices(self) -> int:
        """What scaling is measured against: GPUs, or worker processes on the CPU."""
        return self.workers * max(1, self.gpus_per_worker)

    @property
    def batch_per_device(self) -> int:
        return self.batch_size // max(1, self.gpus_per_worker)


def seed_preset() -> List[Variant]:
    """The seed study's six setups (ResNet-110, CIFAR-10, 300 epochs)."""
    return [
        Variant("1gpu-bs128", "1 machine, 1 GPU", 128, gpus_per_worker=1),
        Variant("1gpu-bs256", "1 machine, 1 GPU", 256, gpus_per_worker=1),
        Variant("2gpu-bs256", "1 machine, 2 GPUs", 256, gpus_per_worker=2),
        Variant("4gpu-bs512", "1 machine, 4 GPUs", 512, gpus_per_worker=4),
        Variant("8gpu-bs1024", "1 machine, 8 GPUs", 1024, gpus_per_worker=8),
        Variant("2x4gpu-bs512", "2 machines x 4 GPUs", 512, workers=2, hosts=2, gpus_per_worker=4,
                kvstore="dist_sync"),
    ]


# The seed study's measurements (GTX TITAN X, MXNet of 2016-12), shown beside ours.
SEED_REFERENCE = {
    "1gpu-bs128": {"sec_per_epoch": 51, "gpu_util_pct": 90},
    "1gpu-bs256": {"sec_per_epoch": 44, "gpu_util_pct": 95},
    "2gpu-bs256": {"sec_per_epoch": 24, "gpu_util_pct": 90},
    "4gpu-bs512": {"sec_per_epoch": 12, "gpu_util_pct": 90},
    "8gpu-bs1024": {"sec_per_epoch": 7.0, "gpu_util_pct": 80},
    "2x4gpu-bs512": {"sec_per_epoch": 6.5, "gpu_util_pct": 87},
}


def seed_k8s_preset() -> List[Variant]:
    """The seed's Kubernetes study: one machine with 4 GPUs (``device``), ``dist_sync`` with every
    role on one machine, and ``dist_sync`` over two machines; 128 and 256 images per GPU. The
    two-machine variant also runs its pods with ``hostNetwork: true`` (Kubernetes only), so that
    the report can split the k8s/ssh gap into the pod network's part and the container's."""
    variants = []
    for per_gpu in (128, 256):
        variants += [
            Variant(f"device-4gpu-b{per_gpu}", "1 machine, 4 GPUs, device", 4 * per_gpu, gpus_per_worker=4),
            Variant(f"dist-1x4gpu-b{per_gpu}", "1 machine, 4 workers x 1 GPU, dist_sync", per_gpu, workers=4,
                    gpus_per_worker=1, kvstore="dist_sync"),
            Variant(f"dist-2x4gpu-b{per_gpu}", "2 machines x 4 GPUs, dist_sync", 4 * per_gpu, workers=2, hosts=2,
                    gpus_per_worker=4, kvstore="dist_sync"),
        ]
        variants.append(host_network_twin(variants[-1]))
    return variants


def host_network_twin(variant: Variant) -> Variant:
    """The same variant with its pods on the host network, run under Kubernetes only."""
    return replace(variant, id=variant.id + HOST_NETWORK_SUFFIX, setup=variant.setup + ", hostNetwork",
                   host_network=True, launchers=("kubernetes",))


def cpu_demo_preset() -> List[Variant]:
    """A CPU matrix that finishes in minutes on 2 cores: 1, 2 and 4 workers, two batch sizes.

    Local dist_sync workers stand in for machines; on a 2-core box they share the
    cores, so the scaling it shows is the box's, not MXNet's.
    """
    variants = []
    for batch in (32, 64):
        variants.append(Variant(f"cpu1-bs{batch}", "1 process (CPU)", batch, kvstore="local",
                                num_layers=8, epochs=3, disp_batches=5))
        for workers in (2, 4):
            variants.append(Variant(f"cpu{workers}w-bs{batch}", f"{workers} workers dist_sync (CPU)", batch,
                                    workers=workers, kvstore="dist_sync", num_layers=8, epochs=3,
                                    disp_batches=5))
    # the seed's 2-machine shape: under ssh each worker on its own host, under local each host a
    # loopback address of this machine
    variants.append(Variant("cpu2h-bs64", "2 hosts x 1 worker dist_sync (CPU)", 64, workers=2, hosts=2,
                            kvstore="dist_sync", num_layers=8, epochs=3, disp_batches=5))
    variants.append(host_network_twin(variants[-1]))
    return variants


def cpu_link_preset() -> List[Variant]:
    """The 2-host variant over two links of the same ssh hosts: their default one and their
    ``slow`` one (each connection's ``mxbench_links``; the demo's hosts have both), in the same
    rounds, so that the scaling model of this one DAG run learns the network term from the two rates
    (``mxbench scaling RUN_DIR``); cpu1-bs64 is the model's third size."""
    demo = {v.id: v for v in cpu_demo_preset()}
    two_hosts = demo["cpu2h-bs64"]
    return [demo["cpu1-bs64"], two_hosts,
            replace(two_hosts, id=f"cpu2h-bs64-{SLOW_LINK}", setup=f"{two_hosts.setup}, {SLOW_LINK} link",
                    link=SLOW_LINK, launchers=("ssh",))]


def convergence_preset() -> List[Variant]:
    """The seed's batch-size question, timed to accuracy (``convergence``): one model (ResNet-8, on
    the CPU) at batch 128, 200 and 256, for enough epochs that validation accuracy climbs past the
    preset's target on the synthetic data (a few minutes on 2 cores); on a real CIFAR-10 raise
    ``epochs``. The smallest batch is the reference a faster but later variant is flagged against."""
    return [Variant(f"conv-bs{batch}", "1 process (CPU)", batch, kvstore="local", num_layers=8, epochs=8,
                    disp_batches=5) for batch in (128, 200, 256)]


def preset(name: str) -> List[Variant]:
    if name == "seed":
        return seed_preset()
    if name == "cpu-demo":
        return cpu_demo_preset()
    if name == "cpu-link":
        return cpu_link_preset()
    if name == "seed-k8s":
        return seed_k8s_preset()
    if name == "aa-calibration":  # the demo's and the regression DAG's; the preset turns A/A on (``calibrating``)
        return [v for v in cpu_demo_preset() if v.id in ("cpu1-bs64", "cpu2w-bs64", "cpu2h-bs64")]
    if name == "convergence":
        return convergence_preset()
    raise VariantError(f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")


@dataclass(frozen=True)
class Target:
    """What a launcher's machines offer: hosts, and GPUs on each.

    ``one_machine``: every host of a variant is a loopback address of one machine (the local
    launcher): any number of hosts fit, and they share that machine's GPUs.
    """

    launcher: str
    hosts: int
    gpus_per_host: int
    one_machine: bool = False
    on_this_machine: bool = False  # its hosts include the machine the Airflow task runs on
    notes: Tuple[str, ...] = ()  # what the report must say about these machines
    host_network: bool = False  # its pods may run on the node's network (Kubernetes: allow_host_network)
    stand_in: bool = False  # a stand-in for the real thing (the loopback Kubernetes API server)
    links: Tuple[str, ...] = ()  # the links other than their default that every host has (ssh: mxbench_links)


def check_fits(variant: Variant, target: Target) -> Optional[str]:
    """Why ``variant`` cannot run on ``target``, in one line; None when it can."""
    if variant.link and variant.link not in target.links:
        return (f"variant {variant.id} runs over the hosts' link {variant.link!r}, which not every {target.launcher} "
                f"host has (an ssh connection's mxbench_links names it)")
    if variant.host_network and not target.host_network:
        return (f"variant {variant.id} runs its pods on the host network, which the {target.launcher} target does "
                "not allow (mxbench_pod.allow_host_network of the kubernetes_connection)")
    if target.one_machine:
        need = variant.workers * variant.gpus_per_worker
        if need > target.gpus_per_host:
            return (f"variant {variant.id} needs {need} GPUs; the {target.launcher} target has "
                    f"{target.gpus_per_host}")
        return None
    if variant.hosts > target.hosts:
        return (f"variant {variant.id} needs {variant.hosts} hosts; the {target.launcher} target has "
                f"{target.hosts}")
    workers_per_host = -(-variant.workers // variant.hosts)
    need = workers_per_host * variant.gpus_per_worker
    if need > target.gpus_per_host:
        return (f"variant {variant.id} needs {need} GPUs per host; the {target.launcher} target has "
                f"{target.gpus_per_host}")
    return None


def select_variants(params: dict) -> List[Variant]:
    """The preset's variants with the params' overrides applied."""
    overrides: dict = {}
    if params.get("epochs") is not None:
        overrides["epochs"] = int(params["epochs"])
    if params.get("num_layers") is not None:
        depth = int(params["num_layers"])
        if depth not in DEPTHS:
            raise VariantError(f"num_layers {depth} is not one of {DEPTHS}")
        overrides["num_layers"] = depth
    variants = [replace(v, **overrides) for v in preset(params.get("preset", "cpu-demo"))]
    only = params.get("only_variants") or []
    unknown = sorted(set(only) - {v.id for v in variants})
    if unknown:
        raise VariantError(f"only_variants names {', '.join(unknown)}, not in preset {params.get('preset')!r} "
                           f"({', '.join(v.id for v in variants)})")
    return [v for v in variants if not only or v.id in only]


def run_key(variant_id: str, launcher: str, repeat: int) -> str:
    return f"{variant_id}__{launcher}__r{repeat}"


def calibrating(params: dict) -> bool:
    """Whether each launcher runs as two arms (A/A calibration): ``aa_calibration``, or its preset."""
    return bool(params.get("aa_calibration")) or params.get("preset") == "aa-calibration"


def leg(run: dict) -> str:
    """What a run is compared as: its launcher, or (A/A calibration) its launcher's arm b, ``local-b``."""
    return run["launcher"] + (ARM_B if run.get("arm") == "b" else "")


def launcher_of(leg_name: str) -> str:
    """The launcher a leg (``leg``) runs under: ``local`` for ``local-b``, itself otherwise."""
    return leg_name.removesuffix(ARM_B)


Ordered = TypeVar("Ordered")  # a launcher name, or an A/A arm ("a", "b" or None)


def round_order(launchers: Sequence[Ordered], round_number: int) -> List[Ordered]:
    """The order the launchers run in, in round ``round_number`` (1, 2, ...): counterbalanced.

    Each even round runs the previous one backwards (a b, b a; a b c, c b a), so over every two
    rounds each launcher's mean position is the same and a linear drift of the machines cancels
    from every pair's comparison, not just alternates. Every other two rounds start one launcher
    further on (a b c, c b a, b c a, a c b, c a b, b a c): with three launchers, six rounds are a
    Williams Latin square, each launcher in each position and after each other equally often. Two
    launchers get a b, b a, b a, a b: ABBA, then BAAB.
    """
    shift = ((round_number - 1) // 2) % max(1, len(launchers))
    rotated = list(launchers[shift:]) + list(launchers[:shift])
    return rotated[::-1] if (round_number - 1) % 2 else rotated


def budget(params: dict) -> Tuple[int, int]:
    """(rounds always run, most rounds): ``repeats`` and ``max_repeats`` (empty: ``repeats``), or,
    in the regression DAG, ``repeats`` and ``repeats`` + ``confirm_rounds``."""
    repeats = int(params.get("repeats", rounds_needed()))
    if confirming(params):
        return repeats, repeats + int(params["confirm_rounds"])
    most = params.get("max_repeats")
    most = repeats if most is None else int(most)
    if most < repeats:
        raise VariantError(f"max_repeats ({most}) is below repeats ({repeats}): the budget must allow at least "
                           "the rounds always run")
    target_gap = params.get("target_gap")
    if most > repeats and not (target_gap is not None and 0 < float(target_gap) < 1):
        raise VariantError(f"max_repeats above repeats needs a target_gap between 0 and 1 to stop by, got "
                           f"{target_gap!r}")
    return repeats, most


def confirming(params: dict) -> bool:
    """Whether the rounds beyond ``repeats`` confirm a suspected regression (the regression DAG's
    ``confirm_rounds``) rather than settle a launcher comparison."""
    return bool(params.get("confirm_rounds"))


def replacement_budget(params: dict) -> int:
    """How many contended rounds (other work on their hosts) may each be replaced by one more round,
    beyond ``max_repeats``: ``contended_replacements``; empty: half of ``max_repeats`` where it is
    set, none where exactly ``repeats`` rounds run. Its own budget, so that a neighbour costs rounds,
    not the plan's (the regression DAG confirms a suspected regression instead: none)."""
    if confirming(params):
        return 0
    repeats, most = budget(params)
    given = params.get("contended_replacements")
    if given is None:
        return most // 2 if most > repeats else 0
    if isinstance(given, bool) or not isinstance(given, int) or given < 0:
        raise VariantError(f"contended_replacements must be a whole number of rounds, 0 or more, got {given!r}")
    return given


def stop_budget(params: dict) -> Optional[Tuple[int, int, float, int]]:
    """(first-stage rounds, most rounds, target gap, contended rounds that may be replaced beyond
    them) when the DAG run's first rounds chose how many to run, or contended rounds may be
    replaced (``stop_rule``), else None."""
    if confirming(params):
        return None
    repeats, most = budget(params)
    spare = replacement_budget(params)
    if most == repeats and not spare:
        return None
    return repeats, most, float(params.get("target_gap", DEFAULT_TARGET_GAP)), spare


def expand_runs(params: dict, targets: Dict[str, Target], unavailable: Optional[Dict[str, str]] = None,
                sets: Optional[Mapping[str, Sequence[str]]] = None,
                refused: Optional[Dict[str, str]] = None) -> List[dict]:
    """Every (variant, launcher, repeat) as a small JSON-able dict; refuses what cannot run.

    Each run carries its ``round`` (= ``repeat``), its ``position`` in the round (1 = first) and
    whether it is ``optional`` (a round beyond ``repeats``, up to ``max_repeats`` and the
    ``contended_replacements`` beyond it).

    All misfits are reported together, one line each, before anything starts. A launcher whose
    machines could not be asked (``unavailable``: launcher -> why) keeps its runs, each carrying
    the reason, so that they fail with it while the other launchers' runs go on. A launcher that
    cannot honour the MXNet build under test (``refused``: launcher -> why) is refused here, one
    line per variant: its runs would measure another build.
    """
    variants = select_variants(params)
    launchers: Sequence[str] = params.get("launchers") or ["local"]
    repeats, most_rounds = budget(params)
    most_rounds += replacement_budget(params)  # rounds beyond max_repeats run only in a contended round's place
    unavailable = unavailable or {}
    problems = []
    for launcher in launchers:
        if launcher in unavailable:
            continue
        if launcher not in targets:
            problems.append(f"launcher {launcher!r} has no target configured")
            continue
        problems += [p for p in (check_fits(v, targets[launcher]) for v in variants
                                 if not v.launchers or launcher in v.launchers) if p]
        if refused and launcher in refused:
            problems += [f"variant {v.id} under {launcher}: {refused[launcher]}" for v in variants
                         if not v.launchers or launcher in v.launchers]
    sets = machine_sets() if sets is None else sets
    for launcher in launchers:
        target = targets.get(launcher)
        if target and target.on_this_machine and "local" in launchers and launcher != "local" \
                and machine_set_of(launcher, sets) != machine_set_of("local", sets):
            problems.append(f"the {launcher} hosts include this machine, but the machine sets put {launcher} and "
                            f"local apart ({MACHINE_SETS_ENV}): their runs would overlap and spoil each other")
    if problems:
        raise VariantError("; ".join(problems))
    # round-major: a drift over the hours of a long matrix spreads over every variant and
    # launcher alike instead of biasing whichever ran last; within a round, the variant's
    # launchers in counterbalanced order (``round_order``). Rounds beyond ``repeats`` are
    # optional: the DAG skips those the first rounds did not plan (``stop_rule``).
    # A/A calibration: each launcher runs as two arms, spaced like real pairs (``aa_spaced``) and
    # ABBA over the rounds, so each arm pair is paired like two launchers (``calibration``).
    runs = []
    for r in range(1, most_rounds + 1):
        units = [(v, launcher) for v in variants
                 for launcher in round_order([x for x in launchers if not v.launchers or x in v.launchers], r)]
        if calibrating(params):
            legs = aa_spaced(units, round_order(("a", "b"), r), lambda launcher: machine_set_of(launcher, sets))
        else:
            legs = [[(v, launcher, None) for v, launcher in units if v is u] for u in variants]
        for part in legs:
            for position, (v, launcher, arm) in enumerate(part, start=1):
                run = {"launcher": launcher, **({"arm": arm} if arm else {})}
                runs.append({"key": run_key(v.id, leg(run), r), "variant": asdict(v), **run,
                             "repeat": r, "round": r, "position": position, "optional": r > repeats,
                             **({"unavailable": unavailable[launcher]} if launcher in unavailable else {})})
    return runs


def aa_spaced(units: Sequence[tuple], arms: Sequence[str], set_of) -> List[List[tuple]]:
    """One round of an A/A calibration: the round's (variant, launcher) ``units`` in order, each as
    two arms (``arms``: which runs first), one list of (variant, launcher, arm) per machine set
    (``set_of(launcher)``; each set's runs queue apart). Each unit's second arm comes two runs
    after its first, with the next unit's first arm between (u1 a, u2 a, u1 b, u3 a, u2 b, u3 b):
    real launcher pairs run one or two apart with a launcher between, and so do the arms, so the
    noise floor they measure is the real pairs' (back to back, a slow change of load would hide
    from it). The last unit of a set's round, or a lone one, runs its arms back to back."""
    first, second = arms
    parts: Dict[str, List[tuple]] = {}
    for v, launcher in units:
        parts.setdefault(set_of(launcher), []).append((v, launcher))
    spaced = []
    for part in parts.values():
        order = []
        for i, (v, launcher) in enumerate(part):
            order.append((v, launcher, first))
            if i:
                order.append((*part[i - 1], second))
        spaced.append(order + [(*part[-1], second)])
    return spaced


# What a variant's runs measure, beside its id: every field that changes samples/s (``setup`` and
# ``launchers`` only name and place it). An override (``num_layers``, ``epochs``) keeps the id.
MEASURED_FIELDS = ("batch_size", "workers", "hosts", "gpus_per_worker", "kvstore", "num_layers", "epochs",
                   "disp_batches", "host_network")


def measured_setup(variant: Mapping, params: Mapping) -> str:
    """A stable digest of what a run of ``variant`` (its dict, as request.json holds it) measured
    under ``params``: the variant's ``MEASURED_FIELDS`` (the devices follow from them), the data's
    kind (synthetic or real) and, for synthetic data, its size. Runs of one variant id measured the
    same thing only when this matches: the results store keys baselines by it (``setup_key``)."""
    synthetic = (params.get("dataset") or SYNTHETIC) == SYNTHETIC
    facts = {**{name: variant.get(name) for name in MEASURED_FIELDS},
             "data": SYNTHETIC if synthetic else "real",
             "synthetic_images": params.get("synthetic_images") if synthetic else None}
    facts["host_network"] = bool(facts["host_network"])
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def variant_from_dict(data: dict) -> Variant:
    return Variant(**{**data, "launchers": tuple(data.get("launchers") or ())})

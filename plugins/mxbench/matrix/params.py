"""The three DAGs' trigger forms as JSON schemas: the benchmark's, the regression check's (the same
params, a smaller default matrix and the rule's knobs) and the bisect's. Airflow renders each as a
form and refuses a DAG run whose conf breaks it, before any task runs."""
from typing import Dict, Mapping

from mxbench.matrix.variants import (
    DEFAULT_KUBERNETES_CONNECTION,
    DEFAULT_SSH_CONNECTIONS,
    DEFAULT_TARGET_GAP,
    DEPTHS,
    LAUNCHERS,
    PRESETS,
    SYNTHETIC,
)
from mxbench.stats.floors import ALPHA, repeats_needed, rounds_needed

# The quiet check's default wait where the deployment sets none (Airflow's [mxbench] quiet_wait_s)
DEFAULT_QUIET_WAIT_S = 60
QUIET_WAIT_MAX_S = 1800

# The trigger form. Airflow renders it and refuses a DAG run whose conf breaks it.
PARAMS_SCHEMA: Dict[str, dict] = {
    "preset": {"default": "cpu-demo", "type": "string", "enum": list(PRESETS), "title": "Matrix preset",
               "description": "seed: the study's six GPU setups (ResNet-110, 300 epochs); seed-k8s: its "
                              "Kubernetes-vs-ssh study (4 GPUs device, dist_sync on 1 and 2 machines, hostNetwork); "
                              "cpu-demo: a small CPU matrix that runs in minutes on any machine; cpu-link: its "
                              "2-host variant over the ssh hosts' default link and their 'slow' one (mxbench_links), "
                              "so that the scaling model learns the network from the two rates; aa-calibration: "
                              "three of cpu-demo's variants, each launcher against itself (A/A calibration); "
                              "convergence: one CPU model at batch sizes 128, 200 and 256, timed to a target "
                              "accuracy (time to accuracy).",
               "section": "What to run"},
    "only_variants": {"default": [], "type": "array", "items": {"type": "string", "pattern": r"^[\w.-]+$"},
                      "uniqueItems": True, "title": "Only these variants",
                      "description": "Variant ids from the preset (e.g. 1gpu-bs128, cpu2w-bs64); empty: all.",
                      "section": "What to run"},
    "launchers": {"default": ["local"], "type": "array", "items": {"type": "string", "enum": list(LAUNCHERS)},
                  "minItems": 1, "uniqueItems": True, "title": "Launchers",
                  "description": "How each variant is started; every variant runs under each launcher. "
                                 "local: processes on the Airflow worker; ssh: the SSH connections below; "
                                 "kubernetes: one pod per role, on the cluster of the Kubernetes connection below.",
                  "section": "What to run"},
    "ssh_connections": {"default": list(DEFAULT_SSH_CONNECTIONS), "type": "array", "minItems": 1, "maxItems": 64,
                        "uniqueItems": True, "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]{1,200}$"},
                        "title": "SSH hosts (connection ids)",
                        "description": "Airflow SSH connections, one per host, in order: a variant on n hosts "
                                       "uses the first n; the first runs the scheduler. Only connections marked "
                                       "for mxbench (id mxbench_..., or \"mxbench\": true in the extra). Extras: "
                                       "mxbench_python, mxbench_workdir, mxbench_data_dir, mxbench_address, "
                                       "mxbench_env, mxbench_link_rate, mxbench_links, host_key "
                                       "(no_host_key_check: true turns checking off), allow_agent.",
                        "section": "Machines"},
    "kubernetes_connection": {"default": DEFAULT_KUBERNETES_CONNECTION, "type": "string",
                              "pattern": r"^[A-Za-z0-9_.-]{1,200}$", "title": "Kubernetes cluster (connection id)",
                              "description": "An Airflow kubernetes connection marked for mxbench (id mxbench_..., "
                                             "or \"mxbench\": true in the extra); its extra mxbench_pod holds the "
                                             "pod settings (image, namespace, resources, data volume, ...): see "
                                             "docs/launchers.md.",
                              "section": "Machines"},
    "kubernetes_image": {"default": None, "type": ["null", "string"], "maxLength": 500,
                         "pattern": r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$", "title": "Training image",
                         "description": "Empty: the connection's mxbench_pod image. Only images the connection's "
                                        "mxbench_pod.allowed_images match. (The regression DAG runs each MXNet "
                                        "build in the image mxbench_pod.images or image_template gives it.)",
                         "section": "Machines"},
    "results_connection": {"default": None, "type": ["null", "string"], "pattern": r"^[A-Za-z0-9_.-]{1,200}$",
                           "title": "Results database (connection id)",
                           "description": "An Airflow connection to the results database (e.g. PostgreSQL), marked "
                                          "for mxbench (id mxbench_..., or \"mxbench\": true in the extra). Empty: "
                                          "MXBENCH_RESULTS_URL, else results.db under MXBENCH_HOME.",
                           "section": "Machines"},
    "notes": {"default": [], "type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 500},
              "title": "Notes for the report", "description": "Shown at the top of the report, as given.",
              "section": "What to run"},
    "repeats": {"default": rounds_needed(), "type": "integer", "minimum": 1, "maximum": 20, "title": "Repeats",
                "description": "Rounds per variant: each round runs the variant once under each launcher, in "
                               "counterbalanced order (a b, b a, ...) so that a slow drift of the machines cancels. "
                               f"Comparing launchers round by round needs at least {rounds_needed()} rounds (a "
                               "sign-flip test, which the paired verdict falls back to when a slow run makes its "
                               f"ratios non-normal, cannot reach p < {ALPHA:g} over fewer); compared unpaired (a run "
                               f"failed, or the runs overlapped), {repeats_needed()} a side.",
                "section": "What to run"},
    "max_repeats": {"default": None, "type": ["null", "integer"], "minimum": 1, "maximum": 50,
                    "title": "Most rounds (budget)",
                    "description": "Empty: exactly Repeats rounds. Else up to this many rounds (at least Repeats): "
                                   "the first Repeats rounds' spread decides how many rounds give every launcher "
                                   "pair of the variant an interval of ±Target gap/2; the rounds beyond that are "
                                   "skipped.",
                    "section": "What to run"},
    "contended_replacements": {"default": None, "type": ["null", "integer"], "minimum": 0, "maximum": 25,
                               "title": "Rounds to replace contended ones",
                               "description": "A round with other work on its hosts (contended) is left out of the "
                                              "verdict and replaced by one more round, beyond Most rounds, up to "
                                              "this many; each costs one round's time. Past it, they are still "
                                              "left out while the quiet rounds are Repeats at least, else judged "
                                              "as measured; the verdict says which. Empty: "
                                              "half of Most rounds (none when Most rounds is empty). 0: none.",
                               "section": "What to run"},
    "target_gap": {"default": DEFAULT_TARGET_GAP, "type": "number", "exclusiveMinimum": 0, "maximum": 0.5,
                   "title": "Smallest gap that matters",
                   "description": "With Most rounds: run as many rounds as make every launcher pair's interval "
                                  "± half of this or narrower (0.05: a 5% gap or more would stand outside it). "
                                  "Only the first rounds' spread decides, never the gap's side or p, and the "
                                  "verdict is judged with that spread, so stopping early calls no more false "
                                  "differences.",
                   "section": "What to run"},
    "aa_calibration": {"default": False, "type": "boolean", "title": "A/A calibration",
                       "description": "Run every launcher as two arms (local and local-b, ssh and ssh-b, ...) in "
                                      "the same rounds, and compare each with itself: the report gives this "
                                      "machine's noise floor (spread and drift per run) and how often identical "
                                      "launchers were called different; later reports and the regression check "
                                      "use the latest one for the same hardware. The aa-calibration preset turns "
                                      "it on.",
                       "section": "What to run"},
    "epochs": {"default": None, "type": ["null", "integer"], "minimum": 1, "maximum": 1000,
               "title": "Epochs", "description": "Empty: the preset's (seed 300, cpu-demo 3).",
               "section": "Model"},
    "num_layers": {"default": None, "type": ["null", "integer"], "enum": [None, *DEPTHS],
                   "title": "ResNet depth", "description": "6n+2. Empty: the preset's (seed 110, cpu-demo 8).",
                   "section": "Model"},
    "dataset": {"default": SYNTHETIC, "type": "string", "minLength": 1, "maxLength": 1000,
                "pattern": r"^(synthetic|/[^\s]*|(https?|file)://[^\s]+)$", "title": "CIFAR-10 source",
                "description": "Path or URL of cifar-10-python.tar.gz (or its extracted folder), or "
                               "'synthetic' for generated CIFAR-format data (labelled SYNTHETIC in reports). "
                               "A path or file:// URL must be under MXBENCH_HOME/data or a folder the administrator "
                               "lists in MXBENCH_DATASET_ROOTS; an http(s) URL must be on a public address (or a "
                               "host in MXBENCH_DATASET_PRIVATE_HOSTS).",
                "section": "Data"},
    "synthetic_images": {"default": 3000, "type": "integer", "minimum": 50, "maximum": 50000, "multipleOf": 5,
                         "title": "Synthetic training images",
                         "description": "Size of the generated data set when the source is 'synthetic' "
                                        "(test images: a fifth of it). 50000 matches CIFAR-10.",
                         "section": "Data"},
    "run_timeout_minutes": {"default": 1440, "type": "integer", "minimum": 1, "maximum": 10080,
                            "title": "Run deadline (minutes)",
                            "description": "A run still going after this is killed and reported as failed.",
                            "section": "What to run"},
    "quiet_wait_s": {"default": DEFAULT_QUIET_WAIT_S, "type": "integer", "minimum": 0, "maximum": QUIET_WAIT_MAX_S,
                     "title": "Wait for quiet hosts (seconds)",
                     "description": "Before each run, look at its hosts (2 s at a time) until no other process "
                                    "uses a quarter of a core and the hypervisor steals under 5%, for at most this "
                                    "long; then the run starts, quiet or not. The run's meta.json and the runs "
                                    "table say how long it waited and what it saw. Kubernetes nodes are not looked "
                                    "at (a pod sees only its own /proc). 0: no check.",
                     "section": "Machines"},
    "allow_unverified": {"default": False, "type": "boolean", "title": "Allow an unverified archive",
                         "description": "Accept a source whose MD5 is not the official archive's.",
                         "section": "Data"},
}


# The regression DAG's form: the same params, a smaller default matrix, and the rule's knobs.
REGRESSION_PARAMS_SCHEMA: Dict[str, dict] = {
    # stopping early and A/A arms compare launchers; the regression check compares a build with its history
    **{name: schema for name, schema in PARAMS_SCHEMA.items()
       if name not in ("max_repeats", "contended_replacements", "target_gap", "aa_calibration")},
    "preset": {**PARAMS_SCHEMA["preset"], "enum": [p for p in PRESETS if p != "aa-calibration"]},
    "only_variants": {**PARAMS_SCHEMA["only_variants"], "default": ["cpu1-bs64", "cpu2w-bs64"]},
    # one launcher against its own history: the unpaired rule's floor
    "repeats": {**PARAMS_SCHEMA["repeats"], "default": repeats_needed()},
    "epochs": {**PARAMS_SCHEMA["epochs"], "default": 2},
    "synthetic_images": {**PARAMS_SCHEMA["synthetic_images"], "default": 1000},
    "baseline_runs": {"default": 5, "type": "integer", "minimum": 1, "maximum": 50, "title": "Baseline DAG runs",
                      "description": "A variant is compared with its last this many successful DAG runs on the "
                                     "same hardware; with fewer than 2 it has no baseline yet.",
                      "section": "Regression"},
    "min_drop": {"default": 0.05, "type": "number", "minimum": 0, "maximum": 0.9, "title": "Smallest drop to alert on",
                 "description": "A slowdown is a regression only when the test and the interval agree and it is "
                                "at least this much (0.05: 5%).",
                 "section": "Regression"},
    "bisect": {"default": True, "type": "boolean", "title": "Bisect a regression", "section": "Regression",
               "description": "On a regression whose baseline's build and this one have builds between them in "
                              "config/mxnet-builds.json, start mxbench_bisect over them (a DAG run per build "
                              "measured; unpause that DAG for it to run)."},
    "confirm_rounds": {"default": 4, "type": "integer", "minimum": 0, "maximum": 20, "title": "Confirmation rounds",
                       "description": "Rounds beyond Repeats, run only for a variant whose first rounds look like a "
                                      "regression (their median at least half the smallest drop below the "
                                      "baseline's); the alert is then judged over every round. 0: none.",
                       "section": "Regression"},
}


# The bisect DAG's form: a probe is judged against the good build's DAG run, not the store's baseline.
_BUILD_NAME = ("As the versions manifest (config/mxnet-builds.json) names it: a since date (2026-11-04), a "
               "version (1.9.0), a package (mxnet==1.9.0) or 7+ digits of a commit.")

BISECT_PARAMS_SCHEMA: Dict[str, dict] = {
    # a probe is judged against the good build's DAG run, not the store's baseline: none of its knobs
    **{name: schema for name, schema in REGRESSION_PARAMS_SCHEMA.items()
       if name not in ("baseline_runs", "confirm_rounds", "bisect")},
    "only_variants": {**REGRESSION_PARAMS_SCHEMA["only_variants"], "default": ["cpu1-bs64"], "minItems": 1,
                      "maxItems": 1, "title": "Variant",
                      "description": "The one variant id (from the preset) that got slower."},
    "launchers": {**REGRESSION_PARAMS_SCHEMA["launchers"], "maxItems": 1, "title": "Launcher",
                  "description": "The one launcher it got slower under."},
    "good_build": {"type": "string", "minLength": 1, "title": "Good build", "section": "Bisect",
                   "description": "The last build known to be fast. " + _BUILD_NAME},
    "bad_build": {"type": "string", "minLength": 1, "title": "Bad build", "section": "Bisect",
                  "description": "A later build known to be slow. " + _BUILD_NAME},
    # the bisect's own state, which each DAG run hands to the next: empty when a person starts one
    "probe_build": {"default": "", "type": "string", "title": "Build this DAG run measures", "section": "Bisect",
                    "description": "Leave empty: the first DAG run measures the good build, the next ones the "
                                   "builds the bisect picks."},
    "bisect_runs": {"default": [], "type": "array", "title": "Earlier DAG runs of this bisect", "section": "Bisect",
                    "items": {"type": "object", "required": ["build", "run_id"],
                              "properties": {"build": {"type": "string"}, "run_id": {"type": "string"}}},
                    "description": "Leave empty: filled in by the bisect."},
    "bisect_chain": {"default": "", "type": "string", "title": "Bisect chain", "section": "Bisect",
                     "description": "Leave empty: filled in by the bisect (its id in the results store, which "
                                    "refuses a DAG run the chain did not hand these params)."},
}


def with_quiet_wait(schema: Mapping[str, dict], quiet_wait_s: int) -> Dict[str, dict]:
    """``schema`` (one of the forms above) with ``quiet_wait_s`` as the quiet check's default wait:
    the deployment's setting, which the Airflow side reads and hands here."""
    if isinstance(quiet_wait_s, bool) or not isinstance(quiet_wait_s, int) \
            or not 0 <= quiet_wait_s <= QUIET_WAIT_MAX_S:
        raise ValueError(f"quiet_wait_s must be a whole number of seconds from 0 to {QUIET_WAIT_MAX_S}, "
                         f"not {quiet_wait_s!r}")
    return {**schema, "quiet_wait_s": {**schema["quiet_wait_s"], "default": quiet_wait_s}}


def bisect_chain_params(params: Mapping) -> dict:
    """What a bisect chain's digest covers (``store.bisect_chains``): every param of the bisect's
    form but the chain's id, each as ``params`` sets it or else its default, so that a partial
    conf (the regression DAG's) and the DAG run's full params it becomes digest alike; and every
    key the conf carries beyond the form (Airflow passes them all on, and the pipeline reads some,
    e.g. ``max_repeats``), so that none can ride along unseen."""
    return {**{name: value for name, value in params.items() if name not in BISECT_PARAMS_SCHEMA},
            **{name: params.get(name, spec.get("default")) for name, spec in BISECT_PARAMS_SCHEMA.items()
               if name != "bisect_chain"}}

"""The parser on hostile and awkward input: long lines, floods of garbage, restarted runs, role logs
with MXNet's C++ stderr. No test here times anything: linear time is asserted by structure."""
import tracemalloc
from pathlib import Path

import pytest

from mxbench.results import parse
from mxbench.results.metrics import run_metrics
from mxbench.results.parse import MAX_LINE, MAX_NOTICES, MAX_UNPARSED, METRIC, parse_lines, parse_log, parse_run_logs
from mxbench_train.events import parse_event

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


# --- linear time, bounded lines ----------------------------------------------------------------

def test_metric_match_cannot_start_inside_a_word():
    # finditer used to retry from every character of a long word: quadratic in the line's length
    assert METRIC.match("accuracy=0.5", 1) is None and METRIC.match("x-accuracy=0.5", 2) is None
    assert [m.groups() for m in METRIC.finditer("\tTrain-accuracy=0.5 cross-entropy=1.2 ab" + "c" * 8000)] == [
        ("accuracy", "0.5"), ("cross-entropy", "1.2")]


def test_speed_line_with_a_long_word_tail_still_parses():
    parsed = parse_lines(["Epoch[0] Batch [20]\tSpeed: 1.0 samples/sec\taccuracy=0.25 " + "w" * 8000])
    assert parsed.speed[["samples_per_sec", "train_accuracy"]].values.tolist() == [[1.0, 0.25]]


def over_long_log():
    return ["Epoch[0] Batch [20]\tSpeed: 10 samples/sec\taccuracy=0.5 " + "a" * (2 * MAX_LINE) + "\n",
            "Epoch[0] Batch [40]\tSpeed: 20 samples/sec\n",
            "z" * (3 * MAX_LINE)]  # the last line has no newline


def test_over_long_lines_are_read_in_bounded_pieces(tmp_path):
    path = tmp_path / "long.log"
    path.write_text("".join(over_long_log()))
    for parsed in (parse_log(path), parse_lines(over_long_log())):
        assert parsed.speed["samples_per_sec"].tolist() == [10.0, 20.0]
        assert parsed.speed["train_accuracy"].iloc[0] == 0.5
        # line 1: 2 pieces after its first; line 3: its first piece and 2 more
        assert parsed.unparsed_count == 5
        assert all(len(line) <= MAX_LINE for line in parsed.unparsed)


def test_a_file_without_newlines_is_never_one_string(tmp_path, monkeypatch):
    path = tmp_path / "flat.log"
    path.write_text("garbage " * (MAX_LINE // 2))  # 4 pieces, no newline
    longest = []  # of the strings the parser looks at
    monkeypatch.setattr(parse, "parse_event", lambda line: longest.append(len(line)) or parse_event(line))
    parsed = parse_log(path)
    assert parsed.unparsed_count == 4 and max(longest) <= MAX_LINE


# --- bounded memory ------------------------------------------------------------------------------

def test_unparsed_keeps_the_first_lines_and_counts_all():
    lines = [f"garbage {i} key=value Epoch[ near miss" for i in range(250)]
    parsed = parse_lines(lines)
    assert parsed.unparsed == lines[:MAX_UNPARSED] and parsed.unparsed_count == 250


def test_memory_stays_flat_on_a_flood_of_garbage():
    lines = (f"garbage line {i} with words=and Epoch[{i} Batch [ near misses {'x' * 60}" for i in range(50_000))
    tracemalloc.start()
    try:
        parsed = parse_lines(lines)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.unparsed_count == 50_000 and len(parsed.unparsed) == MAX_UNPARSED
    assert peak < 2_000_000  # keeping every line would take ~7 MB


# --- restarts ------------------------------------------------------------------------------------

def one_worker_run(epochs, speed):
    lines = []
    for e in range(epochs):
        lines += [f"INFO:root:Epoch[{e}] Batch [20]\tSpeed: {speed + e}.00 samples/sec\tTrain-accuracy=0.5",
                  f"INFO:root:Epoch[{e}] Batch [40]\tSpeed: {speed + e}.50 samples/sec\tTrain-accuracy=0.5",
                  f"INFO:root:Epoch[{e}] Resetting Data Iterator",
                  f"INFO:root:Epoch[{e}] Time cost={speed / 100:.3f}",
                  f"INFO:root:Epoch[{e}] Validation-accuracy=0.6"]
    return lines


@pytest.mark.parametrize("epochs", [2, 1])
def test_untagged_one_worker_log_appended_twice_is_a_restart_not_a_second_worker(tmp_path, epochs):
    first, second = one_worker_run(epochs, 1000), one_worker_run(epochs, 2000)
    path = tmp_path / "train.log"
    path.write_text("\n".join(first + second) + "\n")
    parsed = parse_log(path)
    assert parsed.workers == 1
    assert parsed.restarts == [len(first) + 1]
    assert set(parsed.speed["samples_per_sec"]) == {2000.0 + e + f for e in range(epochs) for f in (0, 0.5)}
    assert parsed.epochs["time_cost_s"].tolist() == [20.0] * epochs
    assert parsed.restart_note() == f"restarted at line {len(first) + 1}; measured the last run"
    assert run_metrics(parsed)["workers"] == 1


def test_untagged_run_resumed_at_an_earlier_epoch_is_a_restart():
    first = one_worker_run(3, 1000)
    resumed = [line for line in one_worker_run(3, 2000) if "Epoch[0]" not in line]  # --load-epoch 1
    parsed = parse_lines(first + resumed)
    assert parsed.restarts == [len(first) + 1] and parsed.workers == 1
    assert sorted(set(parsed.speed["epoch"])) == [1, 2]


def test_interleaved_seed_log_is_two_workers_and_no_restart():
    parsed = parse_log(LOGS / "seed_2x4gpu_interleaved.log")
    assert parsed.workers == 2 and parsed.restarts == [] and parsed.restart_note() == ""
    assert parse_log(LOGS / "seed_8gpu.log").restarts == []


def test_second_run_start_event_of_a_rank_is_a_restart():
    start = ':::MXBENCH {"event": "run_start", "rank": %d, "num_workers": 2}'
    run = [f"Node[0] {start % 0}", f"Node[1] {start % 1}",
           "Node[0] Epoch[0] Batch [0-5]\tSpeed: 100 samples/sec",
           "Node[1] Epoch[0] Batch [0-5]\tSpeed: 90 samples/sec"]
    parsed = parse_lines(run + [f"Node[0] {start % 0}", "Node[0] Epoch[0] Batch [0-5]\tSpeed: 300 samples/sec"])
    assert parsed.restarts == [5]
    assert parsed.speed["samples_per_sec"].tolist() == [300.0]
    assert [e["rank"] for e in parsed.events] == [0] and parsed.workers == 2  # declared by the last run
    assert parse_lines(run).restarts == []  # one run_start per rank: no restart


def test_tagged_worker_back_in_an_epoch_it_finished_is_a_restart():
    lines = ["Node[0] Epoch[0] Batch [0-5]\tSpeed: 100 samples/sec",
             "Node[1] Epoch[0] Batch [0-5]\tSpeed: 90 samples/sec",
             "Node[0] Epoch[0] Time cost=1.0", "Node[1] Epoch[0] Time cost=1.1",
             "Node[0] Epoch[0] Validation-accuracy=0.5",  # after Time cost, still the same run
             "Node[0] Epoch[0] Batch [0-5]\tSpeed: 300 samples/sec"]
    parsed = parse_lines(lines)
    assert parsed.restarts == [6] and parsed.speed["samples_per_sec"].tolist() == [300.0]


def test_per_rank_file_restart(tmp_path):
    (tmp_path / "rank0.log").write_text("\n".join(one_worker_run(1, 100) + one_worker_run(1, 200)) + "\n")
    (tmp_path / "rank1.log").write_text("\n".join(one_worker_run(1, 90)) + "\n")
    parsed = parse_run_logs(sorted(tmp_path.glob("rank*.log")))
    assert parsed.workers == 2 and parsed.restarts == [6]
    assert parsed.speed.groupby("worker")["samples_per_sec"].max().tolist() == [200.5, 90.5]


# --- MXNet's C++ notices and role logs -----------------------------------------------------------

def test_role_log_with_python_logging_and_cpp_stderr():
    parsed = parse_log(LOGS / "role_worker_p2p.log")
    assert parsed.p2p["enabled_pairs"] == 24 and parsed.p2p["total_pairs"] == 56
    assert parsed.p2p["matrix"][0] == ".vvv...." and len(parsed.p2p["matrix"]) == 8
    assert parsed.notices == [
        "../src/storage/storage.cc:199: Using Pooled (Naive) StorageManager for GPU",
        "../src/kvstore/./comm.h:757: only 24 out of 56 GPU pairs are enabled direct access. It may affect the "
        "performance. You can set MXNET_ENABLE_GPU_P2P=0 to turn it off",
        "../src/operator/nn/./cudnn/./cudnn_algoreg-inl.h:97: Running performance tests to find the best "
        "convolution algorithm, this can take a while... (set the environment variable "
        "MXNET_CUDNN_AUTOTUNE_DEFAULT to 0 to disable)",  # printed twice, kept once
        "../src/executor/graph_executor.cc:1991: Subgraph backend MKLDNN is activated."]
    assert parsed.unparsed == [] and parsed.restarts == []
    assert len(parsed.speed) == 4 and parsed.workers == 1
    assert run_metrics(parsed)["sec_per_epoch"] == pytest.approx(6.95)


def test_cpp_notices_are_capped_and_never_unparsed():
    lines = [f"[10:00:{i % 60:02d}] ../src/operator/op_{i}.cu:{i}: warning {i}" for i in range(30)]
    parsed = parse_lines(lines + lines)
    assert parsed.notices == [line[11:] for line in lines[:MAX_NOTICES]] and parsed.unparsed_count == 0


def test_cpp_line_of_a_dying_trainer_is_a_notice():
    parsed = parse_log(LOGS / "no_speed_lines.log")
    assert parsed.notices == ["src/io/iter_image_recordio_2.cc:172: ImageRecordIOParser2: data/cifar10_train.rec, "
                              "use 4 threads for decoding.."]
    assert parsed.unparsed == ["INFO:root:start with arguments Namespace(batch_size=128)",
                               "Segmentation fault (core dumped)"]


def test_an_event_nested_too_deeply_is_no_event_and_no_traceback(tmp_path):
    """A role log's event line is a host's output: JSON nested past the parser's recursion limit
    reads as a broken event, like any other malformed one."""
    deep = ":::MXBENCH " + '{"event": ' * 5_000 + "1" + "}" * 5_000
    assert parse_event(deep) is None
    log = tmp_path / "rank0.log"
    log.write_text(deep + "\nINFO:root:Epoch[0] Batch [5]\tSpeed: 100.00 samples/sec\taccuracy=0.1\n")
    assert len(parse_log(log).speed) == 1  # the log is read on past it

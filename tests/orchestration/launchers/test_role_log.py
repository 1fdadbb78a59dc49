"""The capped role log: what a host or a pod streams never grows past its cap."""
from mxbench_train.role_log import ECHO_LINE_CHARS, CappedLog, LineSplitter, TaskLogEcho, lines_of


def test_under_the_cap_the_log_is_kept_whole(tmp_path):
    with CappedLog(tmp_path / "r.log", limit=1000) as log:
        for i in range(10):
            log.write(f"line {i}\n".encode())
    assert (tmp_path / "r.log").read_bytes() == b"".join(f"line {i}\n".encode() for i in range(10))


def test_an_endless_stream_keeps_head_and_tail_and_says_what_was_dropped(tmp_path):
    path = tmp_path / "r.log"
    log = CappedLog(path, limit=1000)
    log.write(b"P2P notice at start\n")
    for i in range(20000):
        log.write(f"spam {i:06d}\n".encode())
    log.write(b"last line\n")
    log.close()
    data = path.read_bytes()
    assert data.startswith(b"P2P notice at start\n")
    assert data.endswith(b"last line\n")
    written = 20 + 20000 * 12 + 10
    assert len(data) < 1000 + 200
    assert f"[mxbench: {written - 1000} bytes of this log were dropped here".encode() in data


def test_one_line_without_end_is_capped_too(tmp_path):
    path = tmp_path / "r.log"
    with CappedLog(path, limit=4096) as log:
        for _ in range(1000):
            log.write(b"x" * 65536)
    assert path.stat().st_size < 4096 + 200


def test_the_file_is_readable_while_the_stream_goes_on(tmp_path):
    path = tmp_path / "r.log"
    log = CappedLog(path, limit=100)
    log.write(b"a" * 300)
    log.flush()
    assert path.read_bytes().startswith(b"a" * 50) and b"dropped" in path.read_bytes()
    log.close()


def test_below_the_cap_every_write_is_on_disk_at_once_and_never_rewritten(tmp_path, monkeypatch):
    """A chatty but honest role: its log is appended to as it comes, the tail never held back."""
    path = tmp_path / "r.log"
    log = CappedLog(path, limit=1000)
    rewrites = []
    monkeypatch.setattr(log._file, "truncate", lambda *a: rewrites.append(a))
    for i in range(90):
        log.write(f"line {i:04d}\n".encode())  # 900 bytes: past the head, within the cap
        assert path.stat().st_size == (i + 1) * 10
    assert rewrites == [] and log.dropped == 0
    log.close()


def test_lines_come_in_bounded_pieces():
    splitter = LineSplitter(max_line=4)
    assert splitter.feed(b"a\nb") == [b"a"]
    assert splitter.feed(b"c\n\nd" + b"e" * 10) == [b"bc", b"", b"deee", b"eeee"]
    assert splitter.end() == [b"eee"]
    endless = (b"x" * 1000 for _ in range(100))
    assert max(map(len, lines_of(endless, max_line=64))) == 64


def test_the_task_log_gets_cut_lines_and_no_more_than_its_budget(capsys):
    echo = TaskLogEcho("[worker-0]", budget=5000, rest_in="roles/worker-0.log")
    echo.line("Epoch[0] Batch [20] Speed: 939.26 samples/sec")
    echo.line("y" * 10_000)
    for _ in range(1000):
        echo.line("z" * 100)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[worker-0] Epoch[0] Batch [20] Speed: 939.26 samples/sec"
    assert out[1].endswith(" [line cut]") and len(out[1]) < ECHO_LINE_CHARS + 30
    assert "the rest is in roles/worker-0.log only" in out[-1]
    assert sum(map(len, out)) < 5000 + 200

"""The capped role log: what a host or a pod streams never grows past its cap."""
from mxbench_train.role_log import CappedLog


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

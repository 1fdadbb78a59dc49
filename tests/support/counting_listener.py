"""A TCP port on 127.0.0.1 that records whoever connects: what an unmarked connection points at, so
that a test can say it was never used. Real: a listening socket. Simplified: it speaks no protocol
(it closes every connection at once)."""
import socket
import threading
from contextlib import contextmanager


@contextmanager
def counting_listener():
    """(port, seen): ``seen`` lists the peer of every connection accepted until the block ends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            seen.append(peer)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        stop.set()
        thread.join()
        server.close()

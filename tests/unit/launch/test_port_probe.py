"""The launcher finds the rendezvous port free exactly when the job's store could bind it: a
past job's connections in TIME-WAIT do not make it look taken, a listener does."""

from __future__ import annotations

import socket
import subprocess
import sys

from cpuft.distributed.agent import bound_listener
from cpuft.launch.run import port_probe


def _probe(port: int) -> int:
    return subprocess.run([sys.executable, "-c", port_probe("127.0.0.1", port)],
                          capture_output=True, timeout=30).returncode


def _time_wait_port() -> int:
    """A port whose last connection the server side closed first: it lingers in TIME-WAIT."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the side that closes first keeps TIME-WAIT
    client.recv(1)
    client.close()
    server.close()
    return port


def test_a_port_in_time_wait_is_free_and_a_listened_one_is_not():
    port = _time_wait_port()
    lingering = subprocess.run(["ss", "-tanH", "state", "time-wait", f"sport = :{port}"],
                               capture_output=True, text=True).stdout
    assert lingering.strip(), "the test made no TIME-WAIT connection"
    assert _probe(port) == 0
    with socket.create_server(("127.0.0.1", 0)) as taken:
        assert _probe(taken.getsockname()[1]) != 0


def test_a_store_port_taken_since_the_check_is_one_line(capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        try:
            bound_listener("127.0.0.1", port)
        except SystemExit as e:
            message = str(e.code)
        else:
            raise AssertionError("the store bound a taken port")
    assert message == (f"cpuft agent: port {port} on 127.0.0.1 was taken before the job's "
                       "store could listen there: pass another --master-port")

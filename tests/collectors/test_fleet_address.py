"""``--cluster`` addresses that are not a Dask scheduler fail fast, in one line.

Nothing here starts Dask: a malformed address, a closed port, an HTTP server that
accepts the connection and then waits for a request (the case that hung
``distributed.Client`` past its timeout, deaf to Ctrl-C), and a server that answers
with text. Timeouts are short.
"""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
import time

import pytest

from collectors._fleet.address import check_scheduler
from collectors._fleet.hosts import FleetError
from collectors.fleet import run_fleet_sweep
from collectors.spec import SweepSpec
from regimes.cli import main

SPEC = SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"], "budgets": [2]})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _Banner(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" * 4)


@pytest.fixture
def banner_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Banner)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    "address, needle",
    [
        ("tcp://", "names no host"),
        ("foo://x", "the scheme must be one of"),
        ("tcp://host:notaport", "no valid port"),
        ("tcp://127.0.0.1", "names no port"),
        ("127.0.0.1:8786", "the scheme must be one of"),
        ("tcp://127.0.0.1:99999", "no valid port"),
        ("tcp://127.0.0.1:8786/path", "more than a host and a port"),
    ],
)
def test_malformed_addresses_are_refused_at_once(address, needle):
    started = time.monotonic()
    with pytest.raises(FleetError, match=needle):
        check_scheduler(address, 5.0)
    assert time.monotonic() - started < 1.0


def test_nothing_listening_is_one_line(tmp_path, capsys):
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(FleetError, match="cannot reach the Dask scheduler"):
        check_scheduler(address, 0.5)


@pytest.mark.parametrize("server", ["http_server", "banner_server"])
def test_a_server_that_is_not_dask_fails_within_the_timeout(request, server):
    address = request.getfixturevalue(server)
    started = time.monotonic()
    with pytest.raises(FleetError, match="is not a Dask scheduler"):
        run_fleet_sweep(SPEC, "/nonexistent/never", address, connect_timeout_s=0.5)
    assert time.monotonic() - started < 5.0


def test_the_command_says_it_in_one_line_with_status_2(tmp_path, capsys, http_server):
    spec = tmp_path / "spec.toml"
    spec.write_text('models = ["tiny-gpt2"]\nbackends = ["cpu"]\nbudgets = [2]\n')
    for address in ("tcp://", "foo://x", "tcp://host:notaport"):
        assert main(["collect", str(spec), "-o", str(tmp_path / "run"), "--cluster", address]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and address in err[0]
    assert not (tmp_path / "run").exists()

"""The scheduler's address: checked, then probed, before Dask is asked to connect.

``distributed.Client`` given an address that is not a Dask scheduler can wait far past
its timeout (an HTTP server accepts the connection and then says nothing, while the
client waits for a handshake), deaf to Ctrl-C; given a malformed address it waits out
the timeout and then raises a long chained ``TimeoutError``. So the address is parsed
here (scheme, host, port), and a plain socket in the calling thread, with a short
timeout, checks that something listens there and opens with a Dask handshake: a Dask
server writes its handshake as soon as it accepts a connection, headed by its length in
bytes and its number of frames (8-byte little-endian integers each).
"""

from __future__ import annotations

import socket
import struct
from urllib.parse import urlsplit

from .hosts import FleetError

__all__ = ["check_scheduler"]

_SCHEMES = ("tcp", "tls")
"""Transports a fleet runs over (``tls://`` is probed for a listener only)."""

_MAX_FRAMES = 1024
"""More frames than any handshake holds: a reply claiming more is not Dask's."""

_MAX_BYTES = 2**26
"""More bytes than any handshake holds (it is a small dict of versions)."""


def parse_address(cluster: str) -> tuple[str, str, int]:
    """Split ``scheme://host:port``; refuse, naming the part, anything else."""
    example = "give it as tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786"
    try:
        parts = urlsplit(cluster)
        port = parts.port
    except ValueError:
        raise FleetError(f"--cluster {cluster!r} has no valid port; {example}") from None
    if parts.scheme not in _SCHEMES:
        raise FleetError(
            f"--cluster {cluster!r}: the scheme must be one of {list(_SCHEMES)}; {example}"
        )
    if not parts.hostname:
        raise FleetError(f"--cluster {cluster!r} names no host; {example}")
    if port is None:
        raise FleetError(f"--cluster {cluster!r} names no port; {example}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise FleetError(f"--cluster {cluster!r} has more than a host and a port; {example}")
    return parts.scheme, parts.hostname, port


def check_scheduler(cluster: str, timeout_s: float) -> None:
    """Check that a Dask scheduler answers at ``cluster`` within ``timeout_s`` seconds.

    Raises
    ------
    FleetError
        A malformed address, nothing listening, or a listener that does not speak Dask
        (each in one line naming the address).
    """
    scheme, host, port = parse_address(cluster)
    start = "start one with `dask scheduler` and pass the address it prints"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if scheme == "tcp":
                _expect_handshake(sock, cluster, timeout_s)
    except FleetError:
        raise
    except OSError as exc:  # refused, unreachable, unknown host, timed out
        why = exc.strerror or str(exc) or type(exc).__name__
        raise FleetError(
            f"cannot reach the Dask scheduler at {cluster!r} ({why}); {start}"
        ) from None


def _expect_handshake(sock: socket.socket, cluster: str, timeout_s: float) -> None:
    sock.settimeout(timeout_s)
    try:
        head = _read(sock, 16)
    except TimeoutError:
        head = b""
    size, frames = struct.unpack("<QQ", head) if len(head) == 16 else (0, 0)
    if not (0 < frames <= _MAX_FRAMES and 0 < size <= _MAX_BYTES):
        said = "said nothing" if not head else f"answered {head[:16]!r}"
        raise FleetError(
            f"{cluster!r} is not a Dask scheduler: it accepted the connection but {said} "
            f"within {timeout_s:g} s, where a scheduler sends its handshake at once; check "
            "the port (`dask scheduler` prints its address)"
        )


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data

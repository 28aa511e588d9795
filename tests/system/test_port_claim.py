"""A held claim on the gateway's port: the gateways' SO_REUSEPORT listeners bind and get every
connection, anyone else's bind is refused, and releasing it frees the port."""

from __future__ import annotations

import errno
import socket

import pytest

from mirror.serving import PortInUse, bind_socket, claim_port


def _exclusive_bind(port: int) -> OSError | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc
    return None


def test_a_held_claim_keeps_the_port_for_reuseport_listeners_only_until_released() -> None:
    claim = claim_port("127.0.0.1", 0, what="mirror gateway", fix="choose another", hold=True)
    try:
        refused = _exclusive_bind(claim.port)
        assert refused is not None and refused.errno == errno.EADDRINUSE
        with pytest.raises(PortInUse):
            claim_port("127.0.0.1", claim.port, what="mirror gateway", fix="choose another")
        listener = bind_socket("127.0.0.1", claim.port, "mirror gateway", reuse_port=True)
        try:
            listener.settimeout(5)
            for _ in range(20):  # the held socket never listens: every connection reaches the listener
                with socket.create_connection(("127.0.0.1", claim.port), timeout=5):
                    accepted, _address = listener.accept()
                    accepted.close()
        finally:
            listener.close()
    finally:
        claim.release()
    # free again (the accepted connections' TIME_WAIT does not count, as for the claim's own probe)
    claim_port("127.0.0.1", claim.port, what="mirror gateway", fix="choose another").release()


def test_a_claim_without_hold_binds_nothing_after_it_returns() -> None:
    with claim_port("127.0.0.1", 0, what="nats-server", fix="choose another") as claim:
        assert _exclusive_bind(claim.port) is None

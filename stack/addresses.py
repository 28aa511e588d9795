"""Where a machine's servers listen (``--bind``), the address others reach them at (``--advertise``),
and the URLs of the services it uses (``--nats-url``, ``--routes``, ``--llm``), checked before anything starts.

A machine's gateway, and the embedded nats-server and simulator when ``mirror up`` starts them,
listen on the *bind* address. What crosses Ray — the NATS and model URLs in the runtime settings
that every conversation host gets, on whichever machine Ray places it — and what is printed use
the *advertised* one: the bind address itself unless it is ``0.0.0.0`` (every interface), which
names no machine and so needs ``--advertise``.

A bind address other than loopback says that other machines take part; then a loopback URL for
NATS or the model is refused: the conversation hosts on the other machines would dial their own
loopback. Every refusal is :class:`~mirror.stack.errors.InvalidSettings` naming the option.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from mirror.stack.errors import InvalidSettings

__all__ = [
    "ANY_ADDRESS", "LOOPBACK", "advertised_host", "check_bind", "check_reachable", "is_loopback", "nats_urls",
]

LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"
NATS_SCHEMES = ("nats", "tls")


def check_bind(bind: str, option: str = "--bind") -> None:
    """``bind`` must be an IPv4 address of this machine's (or ``0.0.0.0``): the servers bind IPv4 sockets."""
    try:
        ipaddress.IPv4Address(bind)
    except ValueError:
        raise InvalidSettings(option, f"{bind!r} is not an IPv4 address; give one of this machine's addresses "
                                      f"(e.g. 10.0.0.10), {LOOPBACK} for this machine only, or {ANY_ADDRESS} "
                                      "for every interface (with --advertise)") from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: other machines may resolve it


def advertised_host(bind: str, advertise: str | None) -> str:
    """The address put in the URLs others are given: ``advertise``, else ``bind`` (which must then name one machine)."""
    check_bind(bind)
    if advertise is None or advertise == "":
        if bind == ANY_ADDRESS:
            raise InvalidSettings("--advertise", f"--bind {ANY_ADDRESS} listens on every interface but names no "
                                                 "machine: give --advertise, the address (or name) other machines "
                                                 "reach this one at")
        return bind
    if advertise == ANY_ADDRESS or any(character in advertise for character in "/: "):
        raise InvalidSettings("--advertise", f"{advertise!r} is not an address other machines can dial; give a host "
                                             "name or an IP address, without scheme or port")
    if is_loopback(advertise) and not is_loopback(bind) and bind != ANY_ADDRESS:
        raise InvalidSettings("--advertise", f"{advertise} is loopback, but the servers listen on {bind} only: "
                                             f"advertise {bind} (the default) or an address that reaches it")
    return advertise


def nats_urls(text: str, option: str = "--nats-url") -> tuple[str, ...]:
    """The comma-separated NATS URLs in ``text`` (``nats://HOST:PORT,…``), each checked; empty items are refused."""
    urls = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not url for url in urls):
        raise InvalidSettings(option, f"{text!r} is not a list of NATS URLs; give nats://HOST:PORT, several "
                                      "comma-separated (nats://10.0.0.10:4222,nats://10.0.0.11:4222)")
    for url in urls:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise InvalidSettings(option, f"{url!r} is not a URL ({exc}); give nats://HOST:PORT") from None
        if parts.scheme not in NATS_SCHEMES or not parts.hostname or port is None or parts.path not in ("", "/"):
            raise InvalidSettings(option, f"{url!r} is not nats://HOST:PORT (scheme {' or '.join(NATS_SCHEMES)}, "
                                          "a host, a port, nothing after it)")
    return urls


def check_reachable(urls: tuple[str, ...], option: str, bind: str) -> None:
    """Refuse a loopback URL when ``bind`` says other machines take part (see the module docstring)."""
    if is_loopback(bind):
        return
    for url in urls:
        host = urlsplit(url).hostname or ""
        if is_loopback(host):
            raise InvalidSettings(option, f"{url} is a loopback address, but --bind {bind} serves other machines, "
                                          "whose conversation hosts would dial their own loopback: give an address "
                                          f"they reach (or --bind {LOOPBACK} to run on this machine only)")

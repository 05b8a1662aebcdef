"""The client's address behind the site's own proxies: ``REMOTE_ADDR`` made the client's.

Rate limits (guest sessions per address), the login lockout (per account and address, and per
address) and the metrics allow-list read ``REMOTE_ADDR``. Behind a reverse proxy that is the
proxy's address for every diner: all of them would share one address's budget, five wrong
passwords from anywhere would lock a merchant out for everyone, and twenty across accounts
every merchant. When ``REMOTE_ADDR`` is one of
``TRUSTED_PROXIES`` (addresses or networks, e.g. ``10.0.0.2,10.0.1.0/24``), the client is read
from ``X-Forwarded-For``, which each proxy extends with the address it received from: walking
it from the right, past the trusted proxies, the first address is the client's. Entries to its
left were written by the client and are never believed. With no trusted proxies configured
(the default) the header is ignored, so no client can choose its own address. Trust networks
of proxies only: any host inside a trusted network can write any client address.

The proxy's own address stays in ``request.META["PROXY_ADDR"]``. (A proxy that speaks the
PROXY protocol can instead have gunicorn set ``REMOTE_ADDR``: ``--proxy-protocol``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

Network = IPv4Network | IPv6Network


def trusted_networks(entries: Sequence[str], *, setting: str = "TRUSTED_PROXIES") -> list[Network]:
    """``setting``'s addresses or networks parsed; a malformed entry stops the server from
    starting, and so does a network of every address (``0.0.0.0/0``, ``::/0``): trusted as a
    proxy, every client could write its own address (a fresh one per password guess, per guest
    session); allowed to scrape, the whole internet could read the metrics."""
    try:
        networks = [_network(entry) for entry in entries]
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting}: {exc}") from None
    for entry, network in zip(entries, networks, strict=True):
        if network.prefixlen == 0:
            raise ImproperlyConfigured(
                f"{setting}: {entry} holds every address; list only the hosts meant (your "
                "proxies, or Prometheus), by address or network"
            )
    return networks


def _network(entry: str) -> Network:
    """An entry as a network, an IPv4 one written mapped into IPv6 (``::ffff:10.0.0.5``, as a
    dual-stack socket shows an IPv4 client) as IPv4: the addresses it is matched against are
    read so (:func:`_canonical`), and as IPv6 it matched none of them."""
    network = ip_network(entry, strict=False)
    mapped = getattr(network.network_address, "ipv4_mapped", None)
    if mapped is not None and network.prefixlen >= 96:
        return IPv4Network((mapped, network.prefixlen - 96))
    return network


def within(address: str, networks: Sequence[Network]) -> bool:
    """Whether ``address`` (however it is written) lies in one of ``networks``."""
    return _within(address, networks)


def client_address(
    remote: str, forwarded_for: str, proxies: Sequence[Network], *, unix_socket: bool = False
) -> str:
    """The client's address: ``remote`` unless it is a trusted proxy, then the rightmost
    address of ``forwarded_for`` that is not one (or the leftmost, if all are), written in
    one canonical way (an IPv4 address mapped into IPv6, as a dual-stack socket gives it, as
    IPv4; IPv6 compressed, lower case), so that one client is one limit's key. With
    ``unix_socket``, a request with no ``remote`` (gunicorn's for one that came over a unix
    socket, which only this host's processes can reach) is from a trusted proxy too."""
    from_proxy = (unix_socket and not remote) or (bool(proxies) and _within(remote, proxies))
    if not from_proxy:
        return remote
    client = remote
    for entry in reversed(forwarded_for.split(",")):
        candidate = _canonical(_without_port(entry.strip()))
        if candidate is None:
            break  # not an address: nothing further left was written by a proxy we trust
        client = str(candidate)
        if not _within(candidate, proxies):
            break
    return client


# An IPv6 client is given a whole /64 (a home, a phone, a cloud machine) and may send from any
# address in it: per-address limits count it as one.
IPV6_CLIENT_PREFIX = 64
# An IPv4 client that reaches an IPv6-only site through a NAT64 translator arrives with its
# address in the last 32 bits of the well-known prefix (RFC 6052): every such client is in one
# /64, so each is counted as the IPv4 address it stands for.
NAT64_WELL_KNOWN_PREFIX = IPv6Network("64:ff9b::/96")


def limited_address(address: str) -> str:
    """What per-address limits (guest sessions opened, the login lockout) count ``address``
    as: an IPv4 address itself, an IPv6 one as its /64 (written as the network's first
    address, e.g. ``2001:db8:1:2::``), so that a client cannot earn a fresh budget, or a fresh
    round of password guesses, by moving to another address of its own network; an IPv4
    client behind a NAT64 translator (:data:`NAT64_WELL_KNOWN_PREFIX`) as its IPv4 address.
    Anything that is not an address is counted as it is."""
    parsed = _canonical(address)
    if parsed is None:
        return address
    if parsed in NAT64_WELL_KNOWN_PREFIX:
        return str(IPv4Address(int(parsed) & 0xFFFF_FFFF))
    if isinstance(parsed, IPv6Address):
        return str(IPv6Network((parsed, IPV6_CLIENT_PREFIX), strict=False).network_address)
    return str(parsed)


def limited_address_of(request: HttpRequest) -> str:
    """:func:`limited_address` of the request's client (``REMOTE_ADDR``, the client's behind
    the site's proxies); also django-axes' ``AXES_CLIENT_IP_CALLABLE``."""
    return limited_address(request.META.get("REMOTE_ADDR", ""))


def _without_port(entry: str) -> str:
    """An ``X-Forwarded-For`` entry's address: some proxies write the port the client sent
    from (``203.0.113.7:51234``, ``[2001:db8::1]:51234``), or an IPv6 address in brackets.
    Read as no address, every client behind such a proxy counted as the proxy itself, one
    budget for all. A bare IPv6 address is left whole: its colons are its own."""
    if entry.startswith("["):
        address, bracket, rest = entry[1:].partition("]")
        if bracket and (not rest or (rest[0] == ":" and rest[1:].isdigit())):
            return address
        return entry
    address, colon, port = entry.partition(":")
    if colon and port.isdigit() and "." in address:
        return address
    return entry


def _canonical(address: str) -> IPv4Address | IPv6Address | None:
    """``address`` parsed, or None. An IPv6 address with a zone (``fe80::1%eth0``) names a link
    of the host that wrote it, not a client, and its zone is any text of any length."""
    try:
        parsed = ip_address(address)
    except ValueError:
        return None
    if getattr(parsed, "scope_id", None) is not None:
        return None
    return getattr(parsed, "ipv4_mapped", None) or parsed


def _within(address: str | IPv4Address | IPv6Address, proxies: Sequence[Network]) -> bool:
    parsed = _canonical(address) if isinstance(address, str) else address
    return parsed is not None and any(parsed in network for network in proxies)


# The TRUSTED_PROXIES entry for a proxy that reaches gunicorn over a unix socket
# (GUNICORN_BIND=unix:/run/ordering.sock): such a request has no address that an entry could
# name, and without it every client of the site shared one address's limits.
UNIX_SOCKET = "unix"


class ClientAddressMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        entries = settings.TRUSTED_PROXIES
        self.unix_socket = UNIX_SOCKET in entries
        self.proxies = trusted_networks([entry for entry in entries if entry != UNIX_SOCKET])

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.proxies or self.unix_socket:
            remote = request.META.get("REMOTE_ADDR", "")
            forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
            client = client_address(remote, forwarded, self.proxies, unix_socket=self.unix_socket)
            if client != remote:
                request.META["PROXY_ADDR"] = remote
                request.META["REMOTE_ADDR"] = client
        return self.get_response(request)

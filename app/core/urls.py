"""Which webhook URLs shellgate may POST to (SSRF guard).

A `notify_url` must match one of `SHELLGATE_NOTIFY_ALLOW`'s URL globs (the one glob matcher,
app/core/globs.py), matched against the URL in a canonical spelling (scheme and host lower-cased, no
credentials, no fragment) so that `http://127.0.0.1:80@evil/` cannot pass for a loopback glob.
Every address the host stands for must be public, unless a glob that matches the URL names the
host itself, without a `*` in it (`http://127.0.0.1:*`, `https://hooks.internal/*`): private,
loopback, link-local (169.254.169.254 too), unique-local, IPv4-mapped and the like are otherwise
refused. The addresses are checked when the request comes in and again, after a fresh DNS
lookup, before every attempt; the attempt then connects to the address that was checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.core.globs import compile_glob

MAX_URL_LENGTH = 2048
DNS_TIMEOUT_SECONDS = 5.0
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class UrlRefused(ValueError):
    """The URL may not be used; the message says why, for the caller."""


@dataclass(frozen=True)
class ParsedUrl:
    canonical: str  # what the globs match and the record keeps
    scheme: str
    host: str  # lower-case; an IPv6 literal without brackets
    port: int
    host_header: str  # Host: as the URL spells it
    target: str  # path and query, at least "/"


@dataclass(frozen=True)
class Destination:
    """A checked URL and the addresses an attempt may connect to (every one checked)."""

    url: ParsedUrl
    addresses: list[IPAddress]

    def connect_url(self, address: IPAddress) -> str:
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"{self.url.scheme}://{host}:{self.url.port}{self.url.target}"


def parse_url(url: str) -> ParsedUrl:
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused(f"notify_url is longer than {MAX_URL_LENGTH} characters")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F or ord(char) > 0x7E for char in url):
        raise UrlRefused("notify_url must be plain ASCII without spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise UrlRefused(f"notify_url is not a valid URL: {error}") from error
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UrlRefused("notify_url must be an http:// or https:// URL")
    if "@" in parts.netloc:
        raise UrlRefused("notify_url must not carry credentials (user:password@)")
    host = (parts.hostname or "").lower()
    if not host or "%" in host:
        raise UrlRefused("notify_url has no usable host")
    if port == 0:
        raise UrlRefused("notify_url has port 0")
    bracketed = f"[{host}]" if ":" in host else host
    authority = bracketed if port is None else f"{bracketed}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return ParsedUrl(
        canonical=f"{scheme}://{authority}{target}",
        scheme=scheme,
        host=host,
        port=port if port is not None else (443 if scheme == "https" else 80),
        host_header=authority,
        target=target,
    )


def glob_host(pattern: str) -> str | None:
    """The host a glob names literally (lower-case, IPv6 without brackets); None when the
    glob's host part holds a `*`."""
    _, separator, rest = pattern.partition("://")
    if not separator:
        return None
    authority = rest
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    if authority.startswith("["):
        host = authority[1 : authority.find("]")] if "]" in authority else ""
    else:
        host = authority.split(":", 1)[0]
    if not host or "*" in host:
        return None
    return host.lower()


def _canonical_glob(pattern: str) -> str:
    """Scheme and authority lower-cased, as the URLs they are matched against."""
    scheme, separator, rest = pattern.partition("://")
    if not separator:
        return pattern
    cut = min((rest.find(stop) for stop in "/?#" if stop in rest), default=len(rest))
    return f"{scheme.lower()}://{rest[:cut].lower()}{rest[cut:]}"


def is_public(address: IPAddress) -> bool:
    """A globally routable unicast address, looking through IPv4 embedded in IPv6."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is not None and not is_public(embedded):
            return False
    return bool(
        address.is_global
        and not address.is_multicast
        and not address.is_reserved
        and not address.is_unspecified
        and not address.is_loopback
        and not address.is_link_local
        and not address.is_private
    )


class AllowList:
    def __init__(self, globs: list[str]) -> None:
        self.globs = [_canonical_glob(glob) for glob in globs]
        self._matchers = [(compile_glob(glob), glob_host(glob)) for glob in self.globs]

    def admit(self, url: str) -> tuple[ParsedUrl, bool]:
        """The parsed URL and whether a matching glob names its host (private addresses are
        then allowed); UrlRefused when no glob matches."""
        parsed = parse_url(url)
        if not self._matchers:
            raise UrlRefused("notify_url is not accepted: SHELLGATE_NOTIFY_ALLOW is empty")
        matching = [host for matches, host in self._matchers if matches(parsed.canonical)]
        if not matching:
            raise UrlRefused(
                f"notify_url {parsed.canonical} matches no SHELLGATE_NOTIFY_ALLOW pattern"
            )
        return parsed, parsed.host in matching

    async def resolve(self, url: str) -> Destination:
        """The URL admitted and its host resolved now, every address checked; the destination
        to connect to. UrlRefused otherwise."""
        parsed, names_host = self.admit(url)
        addresses = await resolve_host(parsed.host, parsed.port)
        if not names_host:
            for address in addresses:
                if not is_public(address):
                    raise UrlRefused(
                        f"notify_url host {parsed.host} resolves to {address}, a private, "
                        "loopback or link-local address; only a SHELLGATE_NOTIFY_ALLOW "
                        "pattern naming that host allows it"
                    )
        return Destination(parsed, addresses)


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """The host's addresses: a literal as it is, a name through the resolver (in a thread,
    within DNS_TIMEOUT_SECONDS)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), DNS_TIMEOUT_SECONDS
        )
    except (OSError, TimeoutError) as error:
        raise UrlRefused(f"notify_url host {host} does not resolve: {error}") from error
    addresses: list[IPAddress] = []
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UrlRefused(f"notify_url host {host} does not resolve")
    return addresses

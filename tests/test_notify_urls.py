"""The webhook allow-list and address checks (app/core/urls.py), on their own."""

from __future__ import annotations

import ipaddress

import pytest

from app.core.urls import AllowList, UrlRefused, glob_host, is_public, parse_url


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::1",  # 6to4 around 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 around 169.254.169.254
        "ff02::1",
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_a_canonical_spelling_is_what_globs_see() -> None:
    parsed = parse_url("HTTPS://Hooks.Example.COM:8443?x=1#frag")
    assert parsed.canonical == "https://hooks.example.com:8443/?x=1"
    assert parsed.port == 8443 and parsed.host_header == "hooks.example.com:8443"
    assert parse_url("http://[::1]:9/a").canonical == "http://[::1]:9/a"


@pytest.mark.parametrize(
    ("pattern", "host"),
    [
        ("http://127.0.0.1:*", "127.0.0.1"),
        ("https://Hooks.Example.com/*", "hooks.example.com"),
        ("http://[::1]:*", "::1"),
        ("http://*", None),
        ("https://*.example.com/*", None),
        ("*", None),
    ],
)
def test_the_host_a_glob_names(pattern: str, host: str | None) -> None:
    assert glob_host(pattern) == host


def test_only_a_glob_naming_the_host_lets_a_private_address_through() -> None:
    allow = AllowList(["http://127.0.0.1:*", "https://*"])
    assert allow.admit("http://127.0.0.1:8080/x") == (parse_url("http://127.0.0.1:8080/x"), True)
    assert allow.admit("https://10.0.0.1/x")[1] is False
    with pytest.raises(UrlRefused, match="matches no SHELLGATE_NOTIFY_ALLOW pattern"):
        allow.admit("http://127.0.0.2:8080/x")
    with pytest.raises(UrlRefused, match="credentials"):
        allow.admit("http://127.0.0.1:80@169.254.169.254/")


@pytest.mark.parametrize(
    "url", ["ftp://x/", "http:///x", "http://a b/", "http://h:0/", "http://é.com/", "x" * 3000]
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(UrlRefused):
        parse_url(url)

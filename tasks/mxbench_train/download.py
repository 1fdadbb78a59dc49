"""A training data source as a local path: fetched safely, whoever named it (stdlib only).

Downloads have a total deadline and a size cap and never move from https to http, and a
password in a URL is sent as an Authorization header, never written down. Limits, from the
environment: MXBENCH_DOWNLOAD_TIMEOUT_S (1800), MXBENCH_DOWNLOAD_MAX_BYTES (1 GiB).

A source from a trigger form (``--untrusted-source``, what the pipeline passes) reaches only
what an administrator allowed (``SourcePolicy``): a path or file:// URL must resolve, symlinks
and all, under an ``--allowed-root`` or a folder of MXBENCH_DATASET_ROOTS; an http(s) URL must
not reach a loopback, private, link-local or reserved address, checked on the address each
connection actually uses (DNS rebinding, redirects), unless its host is listed in
MXBENCH_DATASET_PRIVATE_HOSTS.
"""
import base64
import hashlib
import http.client
import ipaddress
import math
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from .data_sources import TEST_BATCH, TRAIN_BATCHES, batch_dir
from .errors import MxbenchError
from .redaction import redact

DOWNLOAD_TIMEOUT_S = 1800.0  # the whole download: a trickling server must not hold a run for ever
DOWNLOAD_MAX_BYTES = 1 << 30  # the official archive is ~163 MB


def limit(name, default):
    """A positive number from environment variable ``name`` (of ``default``'s type), else ``default``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
        value = type(default)(value) if math.isfinite(value) else 0
    except ValueError:
        value = 0
    if value <= 0:
        raise MxbenchError(f"{name}={text!r} is not a positive number")
    return value


class SafeRedirect(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) only, and never from https down to plain http."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urllib.parse.urlsplit(req.full_url).scheme, urllib.parse.urlsplit(newurl).scheme
        if new not in ("http", "https") or (old == "https" and new != "https"):
            if fp is not None:
                fp.close()
            raise urllib.error.URLError(f"refused redirect from {old} to {redact(newurl)}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _request(url: str):
    """A request for ``url`` without its user:password, which travel as a Basic auth header only."""
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(redact(url))
    if "@" in parts.netloc:
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        # unredirected: a redirect, maybe to another host, does not carry the password along
        request.add_unredirected_header("Authorization", f"Basic {token}")
    return request


class RefusedAddress(OSError):
    """A download that would reach an address the source policy refuses (urllib reports OSErrors)."""


# IPv6 prefixes whose last 32 bits are an IPv4 address that a translator reaches: NAT64's
# well-known prefix, SIIT's IPv4-translated form (::ffff:0:a.b.c.d, RFC 2765) and the deprecated
# IPv4-compatible form. (6to4 and IPv4-mapped: ipaddress.)
_IPV4_IN_LAST_32_BITS = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::ffff:0:0:0/96"),
                         ipaddress.ip_network("::/96"))
# Refused like a private address, whatever ipaddress says of them: NAT64's local-use prefix (not
# globally reachable, IANA; where its IPv4 address sits is the operator's choice, RFC 6052 allows
# /48 to /96), and site-local addresses (deprecated by RFC 3879, yet routed inside a site).
_NOT_PUBLIC_V6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("fec0::/10"))


def reached_address(address):
    """The address a connection to ``address`` reaches, for the public-address rule: the IPv4
    address inside an IPv4-mapped, SIIT, 6to4, NAT64 or IPv4-compatible IPv6 address; ``address``
    itself otherwise."""
    if address.version == 4:
        return address
    if address.ipv4_mapped or address.sixtofour:
        return address.ipv4_mapped or address.sixtofour
    if any(address in network for network in _IPV4_IN_LAST_32_BITS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def is_public(address) -> bool:
    """Whether a download may reach ``address`` without the host being listed by an administrator."""
    if address.version == 6 and any(address in network for network in _NOT_PUBLIC_V6):
        return False
    reached = reached_address(address)
    return reached.is_global and not reached.is_multicast


@dataclass(frozen=True)
class SourcePolicy:
    """What an untrusted source (a trigger param) may reach: local files under ``roots`` (resolved
    folders), and http(s) servers on public addresses, or on the hosts in ``private_hosts``."""
    roots: Tuple[Path, ...]
    private_hosts: frozenset = frozenset()

    @classmethod
    def from_env(cls, allowed_roots=()):
        """``allowed_roots`` plus MXBENCH_DATASET_ROOTS (os.pathsep-separated absolute folders);
        MXBENCH_DATASET_PRIVATE_HOSTS (comma-separated host names or addresses)."""
        listed = [r for r in os.environ.get("MXBENCH_DATASET_ROOTS", "").split(os.pathsep) if r.strip()]
        for root in listed:
            if not os.path.isabs(root):
                raise MxbenchError(f"MXBENCH_DATASET_ROOTS: {root!r} is not an absolute path")
        hosts = os.environ.get("MXBENCH_DATASET_PRIVATE_HOSTS", "")
        return cls(tuple(Path(r).resolve() for r in (*allowed_roots, *listed)),
                   frozenset(h.strip().lower().strip("[]") for h in hosts.split(",") if h.strip()))

    def local(self, path: Path, source) -> Path:
        """``path`` resolved (symlinks too), if it lies under an allowed root; checked before its
        existence, so that a refusal says nothing about files elsewhere."""
        resolved = path.expanduser().resolve()
        if not any(resolved.is_relative_to(root) for root in self.roots):
            raise MxbenchError(
                f"CIFAR-10 source {redact(source)} is not under a folder allowed for data sets "
                f"({', '.join(map(str, self.roots)) or 'none'}); an administrator can list more in "
                "MXBENCH_DATASET_ROOTS")
        if resolved.is_dir():  # a batch may itself be a symlink out of the allowed folder
            for name in (*TRAIN_BATCHES, TEST_BATCH):
                batch = batch_dir(resolved) / name
                if batch.exists() and not any(batch.resolve().is_relative_to(r) for r in self.roots):
                    raise MxbenchError(f"CIFAR-10 source {redact(source)}: {name} links outside the folders "
                                       "allowed for data sets; refused")
        return resolved

    def addresses(self, host: str, port: int):
        """getaddrinfo's answers for ``host``, every one of them checked (a name may resolve to a
        public and a private address at once)."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if host.lower().strip("[]") in self.private_hosts:
            return infos
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0])
            if not is_public(address):
                reached = reached_address(address)
                shown = address if reached == address else f"{address} (IPv4 {reached})"
                raise RefusedAddress(
                    f"{host} resolves to {shown}, a loopback, private, link-local or reserved address: "
                    "refused (an administrator can list the host in MXBENCH_DATASET_PRIVATE_HOSTS)")
        return infos

    def connect(self, address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
        """socket.create_connection to an address checked here: the name is resolved once, and the
        connection goes to what was checked (no second lookup for a rebinding DNS to answer)."""
        host, port = address
        error = None
        for family, kind, proto, _, sockaddr in self.addresses(host, port):
            sock = socket.socket(family, kind, proto)
            try:
                if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                    sock.settimeout(timeout)
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                error = exc
                sock.close()
        raise error or OSError(f"{host} resolves to no address")


def _guarded(connection_class, policy: SourcePolicy, request):
    """A factory of ``connection_class`` whose connection is checked by ``policy``. Every request,
    redirects included, comes through here. Through a proxy (the administrator's, from the
    environment) the proxy connects: the target's name is checked here instead."""
    proxied = request.has_proxy() or bool(request._tunnel_host)
    if proxied:
        target = urllib.parse.urlsplit(request.full_url)
        policy.addresses(target.hostname or "", target.port or (443 if target.scheme == "https" else 80))

    def make(*args, **kwargs):
        connection = connection_class(*args, **kwargs)
        if not proxied:
            connection._create_connection = policy.connect  # http.client's own seam for the socket
        return connection
    return make


class GuardedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, policy: SourcePolicy):
        super().__init__()
        self.policy = policy

    def http_open(self, req):
        return self.do_open(_guarded(http.client.HTTPConnection, self.policy, req), req)


class GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, policy: SourcePolicy):
        super().__init__()
        self.policy = policy

    def https_open(self, req):
        return self.do_open(_guarded(http.client.HTTPSConnection, self.policy, req), req, context=self._context)


def fetch(source, downloads: Path, policy: Optional[SourcePolicy] = None) -> Path:
    """A local path for ``source``: itself (a path or file:// URL, never copied), or an http(s) URL
    downloaded once. ``policy``: what an untrusted source may reach (None: anything).

    A URL's download has a total deadline and a size cap, and a partial one is removed.
    """
    parts = urllib.parse.urlsplit(str(source))
    if parts.scheme not in ("http", "https"):
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise MxbenchError(f"CIFAR-10 source {redact(source)}: a file URL on another host is not supported")
            path = Path(urllib.parse.unquote(parts.path))
        else:
            path = Path(source)
        path = policy.local(path, source) if policy else path.expanduser()
        if not path.exists():
            raise MxbenchError(f"CIFAR-10 source {redact(source)} does not exist")
        return path
    url = redact(source)
    name = Path(parts.path).name or "cifar-10-python.tar.gz"
    # named after the URL without its password: no file name depends on it
    target = downloads / f"{hashlib.sha1(url.encode()).hexdigest()[:12]}-{name}"
    if policy:  # before the cache too: a download made by a trusted caller is no exception
        try:
            policy.addresses(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        except (OSError, ValueError) as exc:
            raise MxbenchError(f"cannot download CIFAR-10 from {url}: {exc}") from None
    if target.is_file():
        return target
    timeout_s = limit("MXBENCH_DOWNLOAD_TIMEOUT_S", DOWNLOAD_TIMEOUT_S)
    max_bytes = limit("MXBENCH_DOWNLOAD_MAX_BYTES", DOWNLOAD_MAX_BYTES)
    late = f"cannot download CIFAR-10 from {url}: not finished within {timeout_s:g} s (MXBENCH_DOWNLOAD_TIMEOUT_S)"
    too_big = f"cannot download CIFAR-10 from {url}: more than {max_bytes} bytes (MXBENCH_DOWNLOAD_MAX_BYTES)"
    downloads.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    deadline = time.monotonic() + timeout_s
    guards = (GuardedHTTPHandler(policy), GuardedHTTPSHandler(policy)) if policy else ()
    opener = urllib.request.build_opener(SafeRedirect, *guards)
    try:
        try:
            # the socket timeout bounds one read; the deadline, checked after each, bounds them all
            with opener.open(_request(str(source)), timeout=min(60.0, timeout_s)) as response, \
                    open(partial, "wb") as out:
                announced = response.headers.get("Content-Length", "")
                if announced.isdigit() and int(announced) > max_bytes:
                    raise MxbenchError(f"cannot download CIFAR-10 from {url}: the server announces {announced} "
                                       f"bytes, more than {max_bytes} (MXBENCH_DOWNLOAD_MAX_BYTES)")
                size = 0
                # read1 returns what has arrived: a read(n) would wait for n bytes of a trickle
                while chunk := response.read1(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise MxbenchError(too_big)
                    if time.monotonic() > deadline:
                        raise MxbenchError(late)
                    out.write(chunk)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if time.monotonic() > deadline:
                raise MxbenchError(late) from None
            plain = isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError)
            cause = str(exc.reason if plain else exc) or type(exc).__name__
            raise MxbenchError(f"cannot download CIFAR-10 from {url}: {cause}") from None
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def content_md5(path: Path) -> str:
    digest = hashlib.md5()
    files = [path] if path.is_file() else [batch_dir(path) / n for n in (*TRAIN_BATCHES, TEST_BATCH)]
    for file in files:
        if not file.is_file():
            raise MxbenchError(f"CIFAR-10 folder {path} has no {file.name}")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


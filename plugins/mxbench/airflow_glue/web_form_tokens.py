"""The triage form's guards against another site's forms: a browser sends the login cookie with any
site's form, so a cookie-authenticated write carries the page's form token (an HMAC of the user and
an expiry, keyed on the api-server's secret) and is refused when the browser says it came from
another site (Sec-Fetch-Site, Origin)."""
from __future__ import annotations

import hashlib
import hmac
import time
import urllib.parse
from typing import Optional

from fastapi import Request

FORM_TOKEN_LIFETIME_S = 12 * 3600  # a history page left open for a working day still posts


def form_secret() -> Optional[bytes]:
    """The key of the triage form's token: a secret the api-server already has ([api_auth]
    jwt_secret, else [api] secret_key); None when it has neither (the page then shows no forms)."""
    from airflow.configuration import conf

    secret = conf.get("api_auth", "jwt_secret", fallback="") or conf.get("api", "secret_key", fallback="")
    return secret.encode() if secret else None


def own_hosts(request: Request) -> set:
    """The host[:port] names this api-server answers as: the request's Host, and that of [api]
    base_url (what browsers see behind a proxy that rewrites Host)."""
    from airflow.configuration import conf

    base = urllib.parse.urlsplit(conf.get("api", "base_url", fallback="") or "").netloc
    return {host for host in (request.headers.get("host", ""), base) if host}


def _signature(user_id: str, expires: int, secret: bytes) -> str:
    return hmac.new(secret, f"mxbench-triage\0{user_id}\0{expires}".encode(), hashlib.sha256).hexdigest()


def form_token(user_id: str, secret: bytes, now: Optional[float] = None) -> str:
    """The token the history page puts in its triage forms for ``user_id``: "<expiry>.<HMAC>"."""
    expires = int(now if now is not None else time.time()) + FORM_TOKEN_LIFETIME_S
    return f"{expires}.{_signature(user_id, expires, secret)}"


def valid_form_token(token: str, user_id: str, secret: bytes, now: Optional[float] = None) -> bool:
    """Whether ``token`` is one ``form_token`` made for ``user_id`` and it has not expired."""
    expires, _, signature = (token or "").partition(".")
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    if not (expires.isascii() and expires.isdigit()) or int(expires) < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(signature.encode(), _signature(user_id, int(expires), secret).encode())


def cross_site(headers, hosts: set) -> Optional[str]:
    """Why a request came from another site, as the browser tells (Sec-Fetch-Site, Origin; ``hosts``:
    ``own_hosts``); None when nothing says so (API clients send neither)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"Sec-Fetch-Site is {site}"
    origin = headers.get("origin")
    if origin is not None and urllib.parse.urlsplit(origin).netloc not in hosts:
        return f"it came from {origin}"
    return None

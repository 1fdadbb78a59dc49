"""What the results store says when it fails: ``StoreError``, and messages that never show a
database URL's password (``shown``, ``without_password``, ``safe_error``, ``errors_without_password``)."""
import contextlib
import re
import urllib.parse
from typing import Iterator, Optional

import sqlalchemy as sa


class StoreError(RuntimeError):
    """Something the store cannot do, said in one line."""

UNSHOWN = "it is not shown, since it may hold a password"


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return f"<an invalid URL: {UNSHOWN}>"


# a password shorter than this is redacted only where it stands as a password (in a URL's
# userinfo, after "password="): anywhere else it is likely a plain part of the message ("a")
BARE_PASSWORD_MIN = 8


def without_password(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url`` and its password nowhere in it: for messages
    that quote what a driver or another library said about the URL. The password goes where it
    stands as one (``user:<password>@``, ``password=<password>``), in any of its spellings (as is,
    percent-encoded); elsewhere too when it is long enough to mean nothing else."""
    text = text.replace(url, shown(url))
    try:
        password = sa.engine.make_url(url).password
    except (sa.exc.ArgumentError, ValueError):
        password = None
    if not password:
        return text
    spellings = sorted({password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)},
                       key=len, reverse=True)
    for spelling in spellings:
        quoted = re.escape(spelling)
        text = re.sub(rf"(://[^\s/@:]*:){quoted}@", r"\1***@", text)
        text = re.sub(rf"(password[\s=:]+['\"]?){quoted}(?=$|[\s'\",;)\]}}])", r"\1***", text,
                      flags=re.IGNORECASE)
        if len(password) >= BARE_PASSWORD_MIN:
            text = text.replace(spelling, "***")
    return text


def safe_error(exc: BaseException, url: Optional[str]) -> BaseException:
    """``exc``, or, where its message or one in its chain quotes ``url`` or its password (a
    driver's may), a StoreError with its message redacted and no chain: a task log shows the whole
    chain."""
    if not url:
        return exc
    chain, link = [], exc
    while link is not None and all(link is not seen for seen, _ in chain):  # a chain may loop
        chain.append((link, f"{type(link).__name__}: {link}"))
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    chain = [told for _, told in chain]
    if all(without_password(told, url) == told for told in chain):
        return exc
    return StoreError(without_password(chain[0], url))


@contextlib.contextmanager
def errors_without_password(url: Optional[str]) -> Iterator[None]:
    """Within the block, an error that quotes ``url``'s password is raised as ``safe_error``'s
    StoreError instead: for tasks that hand the URL to the store (or anything else)."""
    try:
        yield
    except Exception as exc:
        safe = safe_error(exc, url)
        if safe is exc:
            raise
        raise safe from None


def first_line(exc: Exception) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

"""Text as it may be written down (a task log, an error, a stored record): no credentials of a URL.

One rule for both sides (the trainer and the orchestration side import it; stdlib only): every
``scheme://...`` in a text loses its ``user:password@`` and the values of query parameters that
look like credentials (a pre-signed URL's signature, a token, a password). A whole URL, a package
spec (a PEP 508 direct reference ``name @ URL``) and a longer message that quotes either are
redacted alike; so is a password a URL should have encoded (``/ # ? "`` or a space in it: the
``user:password@`` up to the first @ on its line that a host follows, unless a port stands there),
and a ``user:password@host`` without a scheme. The results store's SQLAlchemy URLs keep their own
rule beside it (``mxbench.store.store_errors``: the user stays, the password becomes ``***``).
"""
import re
import urllib.parse

SECRET_QUERY = re.compile(r"token|signature|sig|secret|password|passwd|key|credential|auth|x-amz-"
                          r"|(?<![a-z])(?:pass|pwd)|(?<![a-z])pw(?![a-z])", re.I)
# a URL anywhere in a text: a scheme, ://, then up to whitespace, a quote or an angle bracket (a
# scheme of at most 32 characters: a long run of letters without :// is then read in linear time)
SCHEME = r"[A-Za-z][A-Za-z0-9+.-]{0,31}://"
URL_IN_TEXT = re.compile(SCHEME + r"[^\s'\"<>]+")
# a netloc's user[:password]@ (up to the last @ before the path): what a URL that urlsplit refuses loses
_USERINFO = re.compile(r"^[^/?#]*@")
# scheme://user:password@host where the password may hold what the URL should have encoded (/ # ? "
# ' or spaces, which end a URL_IN_TEXT match or its netloc): up to the first @ on the line that a host
# name or [address] follows, within 256 characters, never across another ://
_RAW_USERINFO = re.compile(rf"(?P<scheme>{SCHEME})[^\s:/?#@\[\]\"'<>]{{0,256}}:"
                           r"(?P<password>(?:(?!://)[^\n@]){0,256})@(?=[A-Za-z0-9\[])")
# what after scheme://host: is a port, not a password: digits, then the path, query, fragment or a space
_PORT = re.compile(r"\d+[/?#\s]")
# user:password@host without a scheme (a connection string, an ssh target), as a word of its own; an
# image by digest (name:tag@sha256:<hex>) is none
_BARE_USERINFO = re.compile(r"(?<![\w.%+~:/@=-])[\w.%+~-]{1,256}:[^\s@/]{1,256}@(?=[A-Za-z0-9\[])"
                            r"(?![\w.+-]*:[0-9A-Fa-f]{32,})")


def redact_url(url: str) -> str:
    """One URL without its user, password and credential-looking query values."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # urlsplit refuses it (a broken [IPv6] host): drop what may be a user:password
        scheme, _, rest = url.partition("://")
        return f"{scheme}://{_USERINFO.sub('', rest)}"
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    if parts.query:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(query=urllib.parse.urlencode(
            [(k, "REDACTED" if SECRET_QUERY.search(k) else v) for k, v in query], safe="/:"))
    return urllib.parse.urlunsplit(parts)


def redact(text) -> str:
    """``text`` (a URL, a package spec, a data source, an error message) with every URL in it redacted
    (``redact_url``), and every user:password@ a URL should have encoded or that stands without a
    scheme; text without credentials comes back as it is."""
    text = _RAW_USERINFO.sub(lambda found: found.group() if _PORT.match(found.group("password"))
                             else found.group("scheme"), str(text))
    text = URL_IN_TEXT.sub(lambda found: redact_url(found.group()), text)
    return _BARE_USERINFO.sub("", text)

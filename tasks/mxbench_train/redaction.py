"""Text as it may be written down (a task log, an error, a stored record): no credentials of a URL.

One rule for both sides (the trainer and the orchestration side import it; stdlib only): every
``scheme://...`` in a text loses its ``user:password@`` and the values of query parameters that
look like credentials (a pre-signed URL's signature, a token). A whole URL, a package spec (a PEP
508 direct reference ``name @ URL``) and a longer message that quotes either are redacted alike.
The results store's SQLAlchemy URLs keep their own rule beside it (``mxbench.store.errors``: the
user stays, the password becomes ``***``).
"""
import re
import urllib.parse

SECRET_QUERY = re.compile(r"token|signature|sig|secret|password|passwd|key|credential|auth|x-amz-", re.I)
# a URL anywhere in a text: a scheme, ://, then up to whitespace, a quote or an angle bracket
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# a netloc's user[:password]@ (up to the last @ before the path): what a URL that urlsplit refuses loses
_USERINFO = re.compile(r"^[^/?#]*@")


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
    (``redact_url``); text without a URL comes back as it is."""
    return URL_IN_TEXT.sub(lambda found: redact_url(found.group()), str(text))

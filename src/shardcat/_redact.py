"""Credentials out of URLs, and out of any text that may quote one.

One place for every URL shardcat stores or prints:

* :func:`redact_url` drops a storage URL's user, password and query-string
  secrets and keeps everything else exactly: it is what the catalog stores;
* :func:`mask_url` replaces them with ``***`` in a URL shown to a person
  (``postgresql://user:***@host/db?password=***``), and never fails, however
  malformed the URL;
* :func:`scrub` does the same in free text (error messages, tracebacks, log
  lines): every ``scheme://`` URL in it is masked, ``password=...`` pairs
  too, and so is every secret known by value (:func:`url_secrets`,
  :class:`Scrubber`), raw, percent-encoded or percent-decoded.

Standard library only: storage, catalog and the CLI import it (``format`` does not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

__all__ = [
    "MASK",
    "Scrubber",
    "is_secret_name",
    "mask_url",
    "mentions_secret",
    "redact_url",
    "scrub",
    "url_secrets",
]

MASK = "***"
MIN_SECRET = 4
"""Shorter values are not searched for in free text (they would mangle it); URLs are masked anyway."""

_SECRET_PREFIXES = ("sig", "signature", "token", "key", "secret", "password", "x-amz-")
_SECRET_PARTS = (
    "passw",
    "secret",
    "token",
    "signature",
    "credential",
    "access_key",
    "accesskey",
    "account_key",
    "accountkey",
    "apikey",
    "api_key",
    "private_key",
    "connection_string",
)


def is_secret_name(name: str) -> bool:
    """Whether a query parameter or a storage option called ``name`` holds a secret.

    A dotted option name is judged by its last part (``client_kwargs.aws_secret_access_key``).
    """
    n = name.strip().lower().rsplit(".", 1)[-1]
    return (
        n.startswith(_SECRET_PREFIXES) or n in ("pwd", "auth") or any(p in n for p in _SECRET_PARTS)
    )


def _split_userinfo(rest: str) -> tuple[str | None, str]:
    """``rest`` (the URL after ``scheme://``) as (userinfo or None, the remainder).

    The userinfo ends at the last ``@`` of the authority; a password with a raw
    ``/`` in it pushes that ``@`` past the first ``/``, which is still taken
    for userinfo when the text before it reads ``user:password`` rather than
    ``host:port``.
    """
    if rest.startswith("/"):  # no authority: sqlite:///path, file:///path, memory:///x
        return None, rest
    head = rest.split("?", 1)[0]
    first = head.split("/", 1)[0]
    if "@" in first:
        cut = first.rindex("@")
    elif "@" in head and ":" in first and not first.startswith("["):
        if first.split(":", 1)[1].isdigit():
            return None, rest  # host:port/path@...: an @ in the path
        cut = head.rindex("@")
    else:
        return None, rest
    return rest[:cut], rest[cut + 1 :]


def _filter_query(query: str, *, drop: bool) -> str:
    kept = []
    for part in query.split("&"):
        name = unquote_plus(part.split("=", 1)[0])
        if part and is_secret_name(name):
            if not drop:
                kept.append(f"{part.split('=', 1)[0]}={MASK}")
        elif part or not drop:
            kept.append(part)
    return "&".join(kept)


def _split_query(rest: str) -> tuple[str, str | None]:
    """(path, query or None): object keys may hold ``#``, so no fragment is split off."""
    path, q, query = rest.partition("?")
    return path, (query if q else None)


def redact_url(url: str) -> str:
    """``url`` without user, password or query-string secrets, safe to log and store.

    Everything else is kept exactly (``memory:///a`` stays ``memory:///a``);
    text without ``://`` is a path and is returned as given.
    """
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    _, rest = _split_userinfo(rest)
    path, query = _split_query(rest)
    if query is not None:
        kept = _filter_query(query, drop=True)
        path = f"{path}?{kept}" if kept else path
    return f"{scheme}://{path}"


_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:/*")


def mask_url(url: str) -> str:
    """``url`` with its password and query-string secrets replaced by ``***``, for messages.

    Never fails: text that is not a URL at all but holds an ``@`` keeps only
    what follows the last one (``scheme:/***@host/db``).
    """
    if "://" in url:
        scheme, rest = url.split("://", 1)
        userinfo, rest = _split_userinfo(rest)
        if userinfo is not None:
            user, colon, _ = userinfo.partition(":")
            if colon and "@" not in user:
                rest = f"{user}:{MASK}@{rest}"
            elif "@" in userinfo:  # several @: which part is the password is anyone's guess
                rest = f"{MASK}@{rest}"
            else:
                rest = f"{userinfo}@{rest}"
        head = f"{scheme}://"
    else:
        head_match = _SCHEME_PREFIX.match(url)
        head = head_match.group() if head_match and "@" in url else ""
        rest = url[len(head) :]
        before = rest.split("?", 1)[0]
        if "@" in before:
            rest = f"{MASK}@{rest[before.rindex('@') + 1 :]}"
    path, query = _split_query(rest)
    if query is not None:
        path = f"{path}?{_filter_query(query, drop=False)}"
    return f"{head}{path}"


def _variants(secret: str) -> set[str]:
    forms = {secret, unquote(secret), unquote_plus(secret)}
    forms |= {quote(f, safe="") for f in list(forms)} | {quote_plus(f) for f in list(forms)}
    return {f for f in forms if len(f) >= MIN_SECRET}


def url_secrets(url: str) -> list[str]:
    """The secrets written in ``url``: its password (and its ``@``/``/``-separated pieces) and
    the values of its secret query parameters; found textually, whatever the URL's shape.
    """
    out: list[str] = []
    password = ""
    if "://" in url:
        userinfo, rest = _split_userinfo(url.split("://", 1)[1])
        password = (userinfo or "").partition(":")[2]
    else:  # not a URL: whatever precedes the last '@' may be a password
        prefix = _SCHEME_PREFIX.match(url)
        rest = url[prefix.end() :] if prefix else url
        before = rest.split("?", 1)[0]
        if "@" in before:
            userinfo = before[: before.rindex("@")]
            password = userinfo.partition(":")[2] or userinfo
    if password:
        out.append(password)
        out += [p for p in re.split(r"[@/:]", password) if p != password]
    _, query = _split_query(rest)
    for part in (query or "").split("&"):
        name, eq, value = part.partition("=")
        if eq and value and is_secret_name(unquote_plus(name)):
            out.append(value)
    return [s for s in out if len(s) >= MIN_SECRET]


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`\\]*")
_PASSWORD_PAIR = re.compile(
    r"(?i)\b((?:ssl)?passw(?:or)?d|pwd)(\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s&;'\",)]+)"
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with known ``secrets`` (in every encoding), URL credentials and
    ``password=...`` pairs replaced by ``***``.
    """
    forms: set[str] = set()
    for s in secrets:
        forms |= _variants(s)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group()), text)
    return _PASSWORD_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)


def mentions_secret(error: BaseException, secrets: Iterable[str]) -> bool:
    """Whether ``error`` or any exception chained to it has a message that :func:`scrub` would change."""
    known = list(secrets)
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        text = str(e)
        if scrub(text, known) != text:
            return True
        todo += [e.__cause__, e.__context__]
    return False


class Scrubber:
    """Hides the secrets it was told about, and any URL's credentials, in text.

    >>> s = Scrubber()
    >>> s.add_options({"key": "AKIA", "secret": "hunter22", "region_name": "eu"})
    >>> s("signed with hunter22 in eu")
    'signed with *** in eu'
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        for s in secrets:
            self.add(s)

    def add(self, secret: str) -> None:
        """Hide ``secret`` (values shorter than :data:`MIN_SECRET` are left alone)."""
        if len(secret) >= MIN_SECRET:
            self._secrets.add(secret)

    def add_url(self, url: str) -> None:
        """Hide the secrets written in ``url`` (see :func:`url_secrets`)."""
        for s in url_secrets(url):
            self.add(s)

    def add_options(self, options: Mapping[str, Any], *, all_values: bool = False) -> None:
        """Hide the values of secret-named options (every value with ``all_values``), nested too."""
        for name, value in options.items():
            if isinstance(value, Mapping):
                self.add_options(value, all_values=all_values or is_secret_name(str(name)))
            elif isinstance(value, str):
                if all_values or is_secret_name(str(name)):
                    self.add(value)
                self.add_url(value)

    @property
    def secrets(self) -> frozenset[str]:
        return frozenset(self._secrets)

    def __call__(self, text: str) -> str:
        return scrub(text, self._secrets)

    def __repr__(self) -> str:
        return f"Scrubber(<{len(self._secrets)} secrets>)"

"""One rule for secrets: what sweeper never writes to a file.

A :class:`Redactor` masks

- the secrets sweeper *knows*: the API key it was given and the user info of the URLs it was
  given (``--base-url``, ``--metrics-url``), also in the forms a server may send them back in
  (the ``Authorization: Basic`` base64 of ``user:password``, percent-decoded, JSON-escaped, or cut
  off by a clipped error message);
- the credentials it can *recognize*: URL user info (``scheme://user:password@host``, dropped as
  :func:`strip_credentials` does), the value of a command-line option named like a key
  (``--api-key X``, ``--api-key=X``, ``--token X``, ``--hf-token``...), ``Authorization:`` headers
  (``Bearer X``, ``Basic X``) and any ``name: value`` / ``name=value`` whose name ends in ``key``,
  ``token``, ``secret``, ``password`` or ``auth`` (``api-key:``, ``x-api-key:``, ``api_key='...'``,
  ``?token=...``).

The trace-set writer (:mod:`sweeper.store`) runs every line, manifest and copied log through one,
so no caller can forget it. Two modes: :meth:`Redactor.text` for raw text (a log, one argument of a
command line) and :meth:`Redactor.json` for a serialized JSON document, where a bare ``"`` is
JSON's own delimiter (so ``"kv_bytes_per_token": {...}`` is a field, never a secret) and a string's
own quotes appear as ``\\"``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

REDACTED = "***"
# A known secret shorter than this is not searched for in free text (it would match too much);
# it is still masked where it is recognized (URL user info, after --api-key...).
MIN_SECRET_CHARS = 4
# A clipped copy of a known secret (an error message cut at N characters) is masked from this
# many of its first characters on.
PARTIAL_SECRET_CHARS = 8
# Values that say there is no secret: kept, so ``api_key=None`` still reads as "no key".
_EMPTY = frozenset(
    {"none", "null", "false", "true", "''", '""', "[]", "{}", "()", REDACTED, "<redacted>"}
)
# A word that follows an option's name in a sentence ("pass --api-key or ..."), not its value.
_WORDS = frozenset(
    {"or", "and", "to", "is", "was", "the", "a", "an", "with", "option", "flag", "not", "of",
     "for", "in", "on", "as", "given", "set", "value", "must", "if", "then", "when", "from"}
)  # fmt: skip

_SCHEME_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@")


# The rules run on the lower-cased text (a name matches in any case without (?i), which makes
# Python's regex engine ~10x slower) and take the values from the original text at the same
# offsets. Each rule's pattern starts with a literal, so the engine skips to candidates fast,
# and runs only where the cheap test (_candidates) says its word is followed as a name is.
# A name ending in one of these words holds a secret ("api_key", "x-api-key", "hf_token"...).
_WORDS_OF_NAMES = {
    "key": "keys?",
    "token": "token",
    "secret": "secret",
    "passw": "passw(?:or)?d",
    "auth": "auth",
    "credential": "credentials?",
}
_NAME = "(?:" + "|".join(f"[\\w-]*{w}" for w in _WORDS_OF_NAMES.values()) + ")"
_SECRET_NAME = re.compile(_NAME + "$")


def is_secret_name(name: str) -> bool:
    """Whether an option or key of this name holds a secret (``api_key``, ``hf_token``...)."""
    return _SECRET_NAME.fullmatch(name.lower()) is not None


# An option of a command line named like one: --api-key, --token, --hf-token, -password...;
# its dash starts a word ("1,000-token prompts" is no option).
_FLAG = r"-(?<![\w.,:/-]-)-?(?:[a-z][\w-]*?)?(?:key|token|secret|passw(?:or)?d|auth|credentials?)"
_FLAG_ARG = re.compile(_FLAG)
_SCHEMES = r"(?:bearer|basic|token|digest|apikey)"


@dataclass(frozen=True)
class _Mode:
    """How one kind of text quotes: raw text (``"`` or ``'``) or a serialized JSON document
    (``\\"`` or ``'``: a bare ``"`` is JSON's own delimiter, so ``"kv_bytes_per_token": {``
    is a field, never a secret)."""

    url: re.Pattern[str]
    flag: re.Pattern[str]
    auth: re.Pattern[str]
    bearer: re.Pattern[str]
    names: dict[bytes, re.Pattern[str]]
    after: re.Pattern[bytes]


def _mode(quote_re: str, value: str, stop: str) -> _Mode:
    """``quote_re``: what quotes a string; ``value``: a value, quoted or not; ``stop``: the
    characters no unquoted value or URL user info runs over."""
    plain = rf"[^\s{stop},;&)}}\]]+"
    return _Mode(
        url=re.compile(rf"://(?P<v>[^\s/?#<>{stop}]*@)"),
        # --api-key X, --api-key=X, or two list items "--api-key", "X" (a command's argv).
        flag=re.compile(
            rf"{_FLAG}(?:(?P<q>[\"']),\s*(?P=q)(?P<item>(?:[^\\\"']|\\.)*)(?=(?P=q))"
            rf"|(?:=|\s+)(?!-)(?P<v>{value}))"
        ),
        auth=re.compile(
            rf"authorization(?:{quote_re})?\s*[:=]\s*(?:{quote_re})?(?:{_SCHEMES}\s+)?(?P<v>{plain})"
        ),
        bearer=re.compile(rf"bearer(?<![\w]bearer)\s+(?P<v>{plain})"),
        names={
            word.encode(): re.compile(rf"{name}(?:{quote_re})?\s*[:=]\s*(?P<v>{value})")
            for word, name in _WORDS_OF_NAMES.items()
        },
        # What follows a name, for the cheap test (on bytes without digits and commas): a
        # quote, a space, ':' or '=' (JSON: no bare '"' before ':', which ends one of JSON's
        # own keys such as "chunk_tokens"), or the end of a list item ('"' then the next '"').
        after=re.compile(rf"[a-z]*(?:{quote_re})?[\s:=]|[a-z]*[\"']\s*[\"']".encode()),
    )


_TEXT = _mode("[\"']", r"\"[^\"\n]*\"|'[^'\n]*'|\[[^\]\n]*\]|[^\s\"'`\\,;&)}\]]+", "\"'`\\\\")
_JSON = _mode(r"\\\"|'", r"\\\"[^\"\\]*\\\"|'[^'\"\\]*'|\[[^\]\"]*\]|[^\s\"'\\,;&)}\]]+", '"\\\\')


def strip_credentials(url: str) -> str:
    """``https://user:key@host/x`` -> ``https://host/x``: a URL safe to write to disk."""
    return _SCHEME_USERINFO.sub(r"\1", url)


def url_secrets(url: str | None) -> list[str]:
    """The secrets in a URL's user info: the password (or a lone token), as written and
    percent-decoded, and the base64 ``user:password`` an HTTP client sends as Basic auth."""
    if not url or "@" not in url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    if "@" not in parts.netloc:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    user, has_password, password = userinfo.partition(":")
    found = [password] if has_password else [user]
    decoded = unquote(userinfo)
    found += [unquote(s) for s in found]
    found.append(base64.b64encode(decoded.encode()).decode())
    return [s for s in found if s]


def header_secrets(headers: Mapping[str, str] | None) -> list[str]:
    """The secrets in request headers: an ``Authorization`` value without its scheme word (and a
    Basic one's decoded password), any ``*key``/``*token`` header's value."""
    found: list[str] = []
    for name, value in (headers or {}).items():
        lower = name.lower()
        if lower in ("authorization", "proxy-authorization"):
            scheme, _, credential = value.strip().partition(" ")
            credential = credential.strip() or scheme
            found.append(credential)
            if scheme.lower() == "basic":
                try:
                    text = base64.b64decode(credential, validate=True).decode()
                except (ValueError, UnicodeDecodeError):
                    continue
                found.append(text.partition(":")[2] or text)
        elif re.fullmatch(_NAME, lower):
            found.append(value.strip())
    return [s for s in found if s]


def run_secrets(
    *,
    api_key: str | None = None,
    urls: Iterable[str | None] = (),
    headers: Mapping[str, str] | None = None,
) -> list[str]:
    """The secrets a recording knows: its API key, its URLs' user info, its headers' values."""
    found = [api_key] if api_key else []
    for url in urls:
        found += url_secrets(url)
    return found + header_secrets(headers)


class Redactor:
    """Masks known secrets and recognized credentials in text (see the module's docstring).

    ``secrets`` are the values sweeper knows (an API key, a URL's password); :meth:`for_run`
    builds them from what a recording was given. A Redactor without secrets still masks what
    it recognizes."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET_CHARS:
                continue
            forms |= {secret, _json_escaped(secret)}
        # Longest first: a secret that holds another is masked whole.
        self.secrets: tuple[str, ...] = tuple(sorted(forms, key=lambda s: (-len(s), s)))
        # What each secret's first characters are in the squeezed text (see _squeeze).
        self._heads = tuple(_squeeze(s[:PARTIAL_SECRET_CHARS]) for s in self.secrets)

    @classmethod
    def for_run(
        cls,
        *,
        api_key: str | None = None,
        urls: Iterable[str | None] = (),
        headers: Mapping[str, str] | None = None,
    ) -> Redactor:
        """The redactor of a recording: its API key, its URLs' user info, its headers' values."""
        return cls(run_secrets(api_key=api_key, urls=urls, headers=headers))

    def text(self, text: str) -> str:
        """Raw text (a log, a message, one argument) with every secret masked, line by line."""
        squeezed = _squeeze(text)
        masked = self._known(text, squeezed, _distinct(squeezed))
        if "\n" not in masked:
            # the squeezed bytes stand as they were unless a known secret was masked
            return _recognized(masked, squeezed if masked is text else _squeeze(masked), _TEXT)
        text = masked
        return "\n".join(_recognized(line, _squeeze(line), _TEXT) for line in text.split("\n"))

    __call__ = text

    def json(self, document: str) -> str:
        """A serialized JSON document with every secret inside its strings masked; the result is
        still valid JSON of the same shape."""
        squeezed = _squeeze(document)
        distinct = _distinct(squeezed)
        masked = self._known(document, squeezed, distinct)
        if masked is not document:
            distinct = _distinct(_squeeze(masked))
        return _recognized(masked, distinct, _JSON)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A command line safe to store: each argument masked, and the argument after an option
        named like a key (``--api-key X``, ``-H 'Authorization: ...'`` is masked inside)."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next and not arg.startswith("-"):
                out.append(REDACTED)
                hide_next = False
                continue
            hide_next = bool(_FLAG_ARG.fullmatch(arg.lower()))
            out.append(self.text(arg))
        return out

    def _known(self, text: str, squeezed: bytes, distinct: bytes) -> str:
        """``text`` with every known secret masked (``squeezed`` and ``distinct``: its
        :func:`_squeeze` and :func:`_distinct` bytes, to skip the secrets that cannot be there)."""
        for secret, head in zip(self.secrets, self._heads, strict=True):
            if (
                head in (squeezed if b"{" in head else distinct)
                and secret[:PARTIAL_SECRET_CHARS] in text
            ):
                text = _mask_secret(text, secret)
        return text


# Deleted before the cheap tests: a line of chunk times shrinks from thousands of bytes to a
# few dozen. Deleting characters only brings the others closer, so what is in a text is still
# in its squeezed bytes (lower-cased the same way): the tests miss nothing.
_NUMBERS = b"0123456789,"
# Past this many bytes, a squeezed text is tested once per distinct part (see _candidates).
_DISTINCT_PARTS_BYTES = 4096
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


def _squeeze(text: str) -> bytes:
    """``text``'s bytes, ASCII lower-cased, without digits and commas."""
    return text.encode("utf-8", "surrogateescape").translate(_LOWER, _NUMBERS)


def _distinct(squeezed: bytes) -> bytes:
    """A long squeezed document (a metrics page: hundreds of series that differ only in their
    digits) once per distinct ``{``-delimited part: what the cheap tests look for never spans a
    ``{`` (a secret that holds one is looked for in the whole text), so nothing is missed."""
    if len(squeezed) <= _DISTINCT_PARTS_BYTES:
        return squeezed
    return b"{".join(set(squeezed.split(b"{")))


def _recognized(text: str, squeezed: bytes, mode: _Mode) -> str:
    """``text`` with the credentials ``mode``'s rules recognize masked."""
    rules = _candidates(squeezed, mode)
    if not rules:
        return text
    lower = _lower(text)
    for rule in rules:
        parts: list[str] = []
        start = 0
        for m in rule.finditer(lower):
            if not _secret_at(m, text):
                continue
            group = "item" if "item" in rule.groupindex and m.start("item") >= 0 else "v"
            begin, end = m.span(group)
            parts += [text[start:begin], "" if rule is mode.url else _masked(text[begin:end])]
            start = end
        if parts:
            text = "".join([*parts, text[start:]])
            lower = _lower(text)
    return text


def _lower(text: str) -> str:
    """``text`` lower-cased, its length kept (offsets in one are offsets in the other)."""
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)  # e.g. U+0130


def _candidates(data: bytes, mode: _Mode) -> list[re.Pattern[str]]:
    """The rules worth running on a text whose squeezed bytes are ``data``: a URL with user
    info; an ``authorization`` or ``bearer``; a word a credential's name ends in, followed as a
    name is; an option named so (``bytes.find`` on a few dozen bytes is far cheaper than any
    regex over the whole line). A long document (a metrics page: hundreds of series that differ
    only in their digits) is tested once per distinct ``{``-delimited part: no word and what
    follows it spans a ``{``, so nothing is missed."""
    rules: list[re.Pattern[str]] = []
    if b"@" in data and b"://" in data:
        rules.append(mode.url)
    if b"authorization" in data:
        rules.append(mode.auth)
    if b"bearer" in data:
        rules.append(mode.bearer)
    named = False
    for word, rule in mode.names.items():
        found = data.find(word)
        while found >= 0:
            if mode.after.match(data, found + len(word)):
                rules.append(rule)
                named = True
                break
            found = data.find(word, found + len(word))
    if named and b"-" in data:
        rules.insert(0, mode.flag)
    return rules


def _secret_at(m: re.Match[str], text: str) -> bool:
    """Whether a match's value is a secret: not a word of a sentence after an option's name
    ("pass --api-key or ..."), not a count of tokens ("#token: 3709")."""
    if "v" not in m.re.groupindex or m.start("v") < 0:
        return True
    value = text[m.start("v") : m.end("v")]
    if value.lower() in _WORDS and m.group(0).startswith("-"):
        return False
    return not (m.group(0).startswith("token") and re.fullmatch(r"[\d.,]+", value))


def _json_escaped(secret: str) -> str:
    import json

    return json.dumps(secret, ensure_ascii=False)[1:-1]


def _mask_secret(text: str, secret: str) -> str:
    """Every copy of ``secret`` in ``text`` masked, and every copy cut off after at least
    :data:`PARTIAL_SECRET_CHARS` of its characters (a clipped message)."""
    head = secret[:PARTIAL_SECRET_CHARS]
    parts: list[str] = []
    start = 0
    found = text.find(head)
    while found >= 0:
        end, matched = found + len(head), len(head)
        while matched < len(secret) and end < len(text) and text[end] == secret[matched]:
            end, matched = end + 1, matched + 1
        parts += [text[start:found], REDACTED]
        start = end
        found = text.find(head, end)
    parts.append(text[start:])
    return "".join(parts)


def _masked(value: str) -> str:
    """REDACTED in place of ``value``, inside its quotes if it has them; a value that says there
    is none (``None``, ``''``) is kept."""
    for quote_ in ('\\"', '"', "'"):
        if len(value) >= 2 * len(quote_) and value.startswith(quote_) and value.endswith(quote_):
            inner = value[len(quote_) : -len(quote_)]
            break
    else:
        quote_, inner = "", value
    if not inner.strip() or inner.strip().lower() in _EMPTY or value.lower() in _EMPTY:
        return value
    return f"{quote_}{REDACTED}{quote_}"


PATTERNS = Redactor()
"""A redactor that knows no secret: masks what it recognizes."""


def redact(text: str) -> str:
    """``text`` with every credential sweeper recognizes masked (:data:`PATTERNS`)."""
    return PATTERNS.text(text)


def redact_argv(argv: Sequence[str], secret: str | None = None) -> list[str]:
    """A command line safe to store: option values named like keys, Authorization headers, URL
    user info, and ``secret`` wherever it appears, masked."""
    return Redactor([secret] if secret else []).argv(argv)

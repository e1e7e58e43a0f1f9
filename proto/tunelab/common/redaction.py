"""Secrets never leave: redaction by name, by shape and by value (issue 23.8, 24.5).

Three ways a secret is found, and once found it is masked wherever it appears:

- **by name** — an environment variable, a flag or a mapping key whose *name* is a secret's
  (``secret_name``): ``HF_TOKEN``, ``--hf-token``, ``*_API_KEY``, ``--api-key``,
  ``*PASSWORD*``, ``*PASSPHRASE*``, ``*SECRET*``, ``*CREDENTIAL*``, ``MY_PASS``, ``PGPASS``,
  ``GH_PAT``, ``SENTRY_DSN``, ``-k``, an upper-case variable ending ``_KEY``
  (``AZURE_OPENAI_KEY``; not a flag: ``--watermark-key`` is a tuning flag); plus the names a spec
  lists under ``redact:`` (and, on the agent, its server's ``redact``). Names are
  read by their parts (split on ``_``/``-``), never by substring: ``TOKEN`` must be the last part
  and none of the parts may say it counts something (``--max-num-batched-tokens``,
  ``--max-total-tokens``, ``MAX_TOKENS_HINT``, ``--bucket-time-to-first-token`` are tuning
  flags), and a switch (``--allow-credentials``, ``--enable-…``) takes no value to hide;
- **by shape** — a URL's user info (``postgresql://u:<redacted>@db``, ``https://<redacted>@sentry``),
  a query parameter named as a secret (``?api_key=<redacted>``, ``&token=``, ``&secret=``),
  a webhook URL's secret path (``https://hooks.slack.com/services/<redacted>``, Discord's and
  Teams' too), an ``Authorization:``/``Bearer`` credential, a PEM private-key block;
- **by value** — every value found the first two ways, and every token read from a token file
  (``known``), is masked in any other string too: another flag's value, a benchmark command, a
  log line, a URL, a failure message (values shorter than ``MIN_VALUE_CHARS`` only by name).

``Redactor`` holds the values; ``for_spec`` collects them from a whole document first, so a
secret given once by name is also masked where it is repeated under a harmless name.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
MIN_VALUE_CHARS = 6  # shorter values are masked where their name says so, not everywhere
# parts that make a name count or size something: a tuning knob, never a credential
COUNTING = frozenset(
    {"max", "min", "num", "per", "first", "last", "each", "size", "ratio", "threshold", "limit",
     "buckets", "bucket", "budget", "count", "len", "length", "usage", "distribution"}
)  # fmt: skip
SWITCHES = frozenset({"enable", "disable", "allow", "use", "no", "skip", "trust", "require"})
KEY_QUALIFIERS = frozenset(
    {"api", "private", "secret", "access", "signing", "encryption", "master", "license",
     "client", "service", "account", "ssh", "gpg", "pgp", "auth", "session", "app", "admin"}
)  # fmt: skip
LAST_PART_SECRETS = frozenset({"token", "pass", "pat", "dsn", "auth", "apikey", "passwd", "pwd"})
ANYWHERE = ("password", "passwd", "passphrase", "secret", "credential", "cookie", "apikey",
            "authorization", "privatekey")  # fmt: skip
SHORT_FLAGS = frozenset({"-k"})  # openssl enc -k PASS, curl-like tools' key

# the look-behind starts a scheme only where one can start: without it a long run of letters
# with no "://" is tried from every position (quadratic: 3 kB of "x" took 1 ms per string)
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?P<user>[^\s/@:]*)(?::(?P<pw>[^\s/@]*))?@"
)
_AUTH_HEADER = re.compile(
    r"(?i)\b(?P<name>(?:proxy-)?authorization|x-api-key|api-key)(?P<sep>\s*[:=]\s*)"
    r"(?:(?P<scheme>bearer|basic|token|digest)\s+)?(?P<cred>[^\s'\",;]+)"
)
# a webhook's path is its credential: whoever has the URL can post
_WEBHOOK = re.compile(
    r"(?i)(?P<base>https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)"
    r"|(?:[a-z0-9-]+\.)?discord(?:app)?\.com/api/webhooks"
    r"|[a-z0-9-]+\.webhook\.office\.com/webhookb2)/)(?P<path>[^\s'\"<>]+)"
)
# a URL's query parameter named as a secret is (``?api_key=…``, ``&token=…``, ``secret=…``)
_QUERY = re.compile(
    r"(?P<lead>[?&;])(?P<name>[A-Za-z][A-Za-z0-9_.\-]{0,63})=(?P<value>[^&#;\s'\"<>]+)"
)
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer)\s+(?P<cred>[A-Za-z0-9._~+/=\-]{4,})")
_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*(?:PRIVATE KEY|KEY BLOCK|ENCRYPTED)[A-Z0-9 ]*)-----"
    r".*?(?:-----END (?P=label)-----|\Z)",
    re.DOTALL,
)


def _parts(name: str) -> list[str]:
    return [p for p in re.split(r"[_\-.\s]+", name.strip("-").lower()) if p]


def secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether a variable, flag or key called ``name`` holds a secret (see the module doc)."""
    return _secret_name(name, tuple(extra))


@functools.lru_cache(maxsize=4096)  # a listing asks the same few dozen names of every row
def _secret_name(name: str, extra: tuple[str, ...]) -> bool:
    if name in SHORT_FLAGS:
        return True
    bare = name.split("=", 1)[0]
    wanted = {_normal(e) for e in extra}
    if wanted and _normal(bare) in wanted:
        return True
    parts = _parts(bare)
    if not parts or parts[0] in SWITCHES or COUNTING.intersection(parts):
        return False
    joined = "".join(parts)
    if any(word in joined for word in ANYWHERE) or joined.startswith("pgpass"):
        return True
    last = parts[-1]
    if last in LAST_PART_SECRETS:
        return True
    if last != "key" or len(parts) < 2:
        return False
    # an environment variable's name (AZURE_OPENAI_KEY, STRIPE_KEY) ending _KEY is a key;
    # a flag or a spec field (--watermark-key) is one only with a qualifier (--api-key)
    return parts[-2] in KEY_QUALIFIERS or (bare.isupper() and not bare.startswith("-"))


def _normal(name: str) -> str:
    return "_".join(_parts(name))


class Redactor:
    """Masks secrets by name, by shape and by the values it knows (see the module doc)."""

    def __init__(self, known: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        self.names = tuple(names)
        self._values: set[str] = set()
        for value in known:
            self.learn(value)

    def learn(self, value: str) -> None:
        """Mask ``value`` wherever it appears from now on (also URL-quoted)."""
        value = value.strip()
        if len(value) < MIN_VALUE_CHARS:
            return
        self._values.add(value)
        quoted = urllib.parse.quote(value, safe="")
        if quoted != value:
            self._values.add(quoted)

    @property
    def known(self) -> frozenset[str]:
        return frozenset(self._values)

    def is_secret(self, name: str) -> bool:
        return secret_name(name, self.names)

    # --- learning from documents --------------------------------------------------------

    def learn_text(self, text: str) -> None:
        """Values that a string's shape gives away: URL passwords, header credentials."""
        if "://" in text:
            for match in _URL_USERINFO.finditer(text):
                self.learn(match["pw"] or match["user"] or "")
            for match in _WEBHOOK.finditer(text):
                self.learn(match["path"])
        if "=" in text:
            for match in _QUERY.finditer(text):
                if self.is_secret(match["name"]):
                    self.learn(match["value"])
        for match in _AUTH_HEADER.finditer(text):
            self.learn(match["cred"])
        for match in _BEARER.finditer(text):
            self.learn(match["cred"])
        for match in _PEM.finditer(text):
            self.learn(match.group(0))

    def learn_argv(self, argv: Sequence[str]) -> None:
        for i, arg in enumerate(argv):
            self.learn_text(arg)
            name, eq, value = arg.partition("=")
            if eq and self.is_secret(name):
                self.learn(value)
            elif (
                arg.startswith("-")
                and self.is_secret(arg)
                and i + 1 < len(argv)
                and not argv[i + 1].startswith("-")
            ):
                self.learn(argv[i + 1])

    def learn_env(self, env: Mapping[str, str]) -> None:
        for name, value in env.items():
            if self.is_secret(name):
                self.learn(str(value))
            self.learn_text(str(value))

    def learn_document(self, value: Any) -> None:
        """Every secret in a JSON-like document: mappings by key, lists as argv, strings."""
        if isinstance(value, Mapping):
            for key, item in value.items():
                if self.is_secret(str(key)) and isinstance(item, str | int | float):
                    self.learn(str(item))
                self.learn_document(item)
        elif isinstance(value, list):
            if all(isinstance(v, str) for v in value):
                self.learn_argv(value)
            for item in value:
                self.learn_document(item)
        elif isinstance(value, str):
            self.learn_text(value)

    # --- masking ------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every known value and every secret by shape masked."""
        if not text:
            return text
        text = _PEM.sub(REDACTED, text)
        if "://" in text:
            text = _URL_USERINFO.sub(_mask_userinfo, text)
            text = _WEBHOOK.sub(lambda m: f"{m['base']}{REDACTED}", text)
        if "=" in text:
            text = _QUERY.sub(self._mask_query, text)
        text = _AUTH_HEADER.sub(_mask_header, text)
        text = _BEARER.sub(lambda m: f"{m['scheme']} {REDACTED}", text)
        for value in sorted(self._values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def _mask_query(self, match: re.Match[str]) -> str:
        if not self.is_secret(match["name"]):
            return match.group(0)
        return f"{match['lead']}{match['name']}={REDACTED}"

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``--api-key X`` and ``--hf-token=X`` keep the flag and lose the value; a switch
        (next item a flag) hides nothing; every other item is masked by shape and value."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next and not arg.startswith("-"):
                out.append(REDACTED)
                hide_next = False
                continue
            hide_next = False
            name, eq, _ = arg.partition("=")
            if arg.startswith("-") and self.is_secret(name):
                if eq:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
            elif eq and not arg.startswith("-") and self.is_secret(name):
                out.append(f"{name}={REDACTED}")  # NAME=value handed to env(1) or a tool
            else:
                out.append(self.text(arg))
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: REDACTED if self.is_secret(k) else self.text(str(v)) for k, v in env.items()}

    def document(self, value: Any) -> Any:
        """A JSON-like document with every secret masked (keys kept)."""
        if isinstance(value, Mapping):
            return {
                key: REDACTED
                if self.is_secret(str(key))
                and isinstance(item, str | int | float)
                and not isinstance(item, bool)
                else self.document(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            if value and all(isinstance(v, str) for v in value):
                return self.argv(value)
            return [self.document(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    @classmethod
    def for_process(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        more_argv: Sequence[str] = (),
        names: Iterable[str] = (),
    ) -> Redactor:
        """A redactor that knows every secret a process is given, ``names`` (a spec's
        ``redact:``) secret as well."""
        redactor = cls(names=names)
        redactor.learn_argv(argv)
        redactor.learn_argv(more_argv)
        redactor.learn_env(env)
        return redactor

    @classmethod
    def for_document(
        cls, value: Any, known: Iterable[str] = (), names: Iterable[str] = ()
    ) -> Redactor:
        redactor = cls(known, names)
        redactor.learn_document(value)
        return redactor


def _mask_userinfo(match: re.Match[str]) -> str:
    if match["pw"] is not None:
        return f"{match['scheme']}{match['user']}:{REDACTED}@"
    if not match["user"]:
        return match.group(0)
    return f"{match['scheme']}{REDACTED}@"


def _mask_header(match: re.Match[str]) -> str:
    scheme = f"{match['scheme']} " if match["scheme"] else ""
    return f"{match['name']}{match['sep']}{scheme}{REDACTED}"


def spec_redactor(spec: Mapping[str, Any], known: Iterable[str] = ()) -> Redactor:
    """The redactor for one experiment spec: its ``redact:`` names, and every secret in it."""
    names = [str(n) for n in spec.get("redact", []) or []]
    return Redactor.for_document(spec, known, names)

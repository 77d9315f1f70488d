"""The clever parts of redaction, as named functions a detector references by ``check:``.

A detector's pattern finds a candidate; its check decides. Each check is a small pure function
with the word lists it reads kept beside it, tested on its own
(``tests/policy/redaction/test_detectors.py``):

- mask checks ``(value, context) -> bool`` (true: mask it): ``random_token``, ``secret_value``.
- replace checks ``(match, word, context) -> (kind | None, replacement) | None`` (``None``: keep
  the match as it is): ``internal_url``, ``dns_name``, ``ip_address``, ``service_label``,
  ``internal_path``.
- cut checks ``(line, match) -> position | None`` (where the internal part starts):
  ``exception_class``, ``module_reference``.
- prefix checks ``(prefix) -> bool`` (true: drop the whole line): ``programming_error``.

Every pattern here runs on upstream text; each is anchored, bounded or one class (see
"Regular expressions on untrusted text" in ``docs/design.md``).
"""

from __future__ import annotations

import ipaddress
import math
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# --- pattern variables: ``${name}`` in a detector's pattern -------------------------------------

#: file extensions of source, config, key and build files (a path ending in one is internal)
SOURCE_EXT = (
    r"py|pyc|pyx|java|class|kt|kts|scala|groovy|clj|js|mjs|cjs|ts|tsx|jsx|vue|svelte|go|rs|rb|"
    r"erb|rake|php|phtml|inc|cs|vb|fs|cshtml|vbhtml|aspx|ascx|ashx|asmx|jsp|jar|war|ear|dll|exe|"
    r"so|dylib|c|h|cc|cpp|hpp|m|mm|swift|ex|exs|erl|hrl|pl|pm|lua|sh|bash|ps1|conf|cfg|ini|env|"
    r"yml|yaml|toml|properties|log|sock|pid|pem|key|crt|p12|pfx|jks|keystore|db|sqlite|sqlite3|"
    r"sql|lock|gemspec|twig|tpl|blade|pyi|pdb|csproj|sln|gradle|pom"
)
#: what ends an exception's class name
EXC_SUFFIX = r"(?:Exception|Error|Fault|Throwable|Panic)"
#: ``${name}`` in detector patterns: one spelling of these lists for the files and the functions
PATTERN_VARS = {"source_ext": SOURCE_EXT, "exc_suffix": EXC_SUFFIX}


@dataclass(frozen=True, slots=True)
class Context:
    """What checks consult beyond their match: built per detector set (operator additions)."""

    #: operator ``allow`` patterns (fullmatch): such a value is never masked or replaced
    allow: tuple[Any, ...] = ()
    #: patterns whose fullmatch makes a host name internal (``host_name: true`` detectors)
    host_names: tuple[Any, ...] = field(default=())

    def allowed(self, value: str) -> bool:
        return any(p.fullmatch(value) is not None for p in self.allow)

    def internal_name(self, host: str) -> bool:
        return any(p.fullmatch(host) is not None for p in self.host_names)


# --- shared helpers -------------------------------------------------------------------------------

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def ascii_lower(text: str) -> str:
    """Lowercase keeping every position (``str.lower`` may lengthen some non-ASCII letters)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def entropy(token: str) -> float:
    """Shannon entropy of ``token`` in bits per character."""
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


# --- mask checks ----------------------------------------------------------------------------------

#: object ids agents are meant to see (Stripe-style prefixes, UUIDs): never "random keys"
PUBLIC_ID = re.compile(
    r"(?:ch|cus|pi|pm|seti|in|sub|prod|price|evt|txn|re|po|acct|card|src|file|si|cs|ii"
    r"|il|ba|py|tr|ipi|cn|dp|du|req|ord|inv|usr|org|prj|item|sku)_[A-Za-z0-9]{6,40}"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def public_id(token: str, context: Context | None = None) -> bool:
    """An id an agent must see: a shipped public-id shape, or one the operator allows."""
    return PUBLIC_ID.fullmatch(token) is not None or (
        context is not None and context.allowed(token)
    )


def looks_random(token: str, context: Context | None = None) -> bool:
    """A long high-entropy token of letters and digits: a key of a format we don't know."""
    digits = sum(map(str.isdigit, token))
    if digits < 2:  # both shapes below need digits; class names in stack traces stop here
        return False
    if public_id(token, context):
        return False
    letters = sum(map(str.isalpha, token))
    mixed_case = any(c.isupper() for c in token) and any(c.islower() for c in token)
    if len(token) >= 24 and mixed_case and digits >= 2:
        return entropy(token) >= 3.6
    return len(token) >= 32 and digits >= 4 and letters >= 4 and entropy(token) >= 3.3


def random_token(value: str, context: Context) -> bool:
    """Mask check: the match (without base64 padding) looks random and is no public id."""
    return looks_random(value.rstrip("="), context)


#: Words that, as the value of "password: ..." and friends, are prose rather than a secret.
PROSE_VALUES = frozenset(
    {
        *("must", "is", "was", "are", "be", "not", "no", "should", "cannot", "can", "too"),
        *("the", "a", "an", "invalid", "expired", "missing", "required", "empty", "null"),
        *("none", "nil", "true", "false", "undefined", "malformed", "revoked", "unknown"),
        *("incorrect", "wrong", "bad", "mismatch", "rejected", "denied", "present", "absent"),
        *("provided", "given", "ok"),
    }
)
#: a value already masked (by an earlier detector, or upstream): "[redacted]", "Bearer [masked]"
REDACTED_VALUE = re.compile(r"^[\"']?(?:\w{1,20}\s)?\[(?:redacted|masked)")


def secret_value(value: str, context: Context | None = None) -> bool:
    """Mask check for the value of ``password=...``: not empty, prose, masked or a short number."""
    bare = value.strip("\"'").strip()
    return not (
        not bare
        or REDACTED_VALUE.match(value)
        or bare.lower() in PROSE_VALUES
        or (bare.isdigit() and len(bare) < 6)
    )


MASK_CHECKS: dict[str, Callable[[str, Context], bool]] = {
    "random_token": random_token,
    "secret_value": secret_value,
}


# --- replace checks -------------------------------------------------------------------------------

Replacement = tuple[str | None, str]

_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def ip_kind(candidate: str) -> str | None:
    """``private_address``, ``ip_address`` (public), or ``None`` when it is no IP address."""
    try:
        address = ipaddress.ip_address(candidate.split("%", 1)[0])
    except ValueError:
        return None
    if (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_reserved
        or address in _CGNAT
    ):
        return "private_address"
    return "ip_address"


def ip_address(match: re.Match[str], word: str, context: Context) -> Replacement | None:
    """Group 1 is an IPv4 or IPv6 address (a colon the message added is kept)."""
    candidate = match.group(1)
    kind = ip_kind(candidate)
    tail = ""
    if kind is None and candidate.endswith(":") and match.group(0).endswith(candidate):
        # "fd00::1: refused": the colon is the message's, not the address's
        kind, tail = ip_kind(candidate[:-1]), ":"
    if kind is None:
        return None
    return kind, word + tail


#: a bare host label that names a service ("orders-db", "redis", "api2"), not a word
SERVICE_LABEL = re.compile(
    r"(?i)[-_\d]|db|sql|redis|mongo|postgres|pg|maria|kafka|rabbit|mq|elastic|solr|cache|"
    r"memcache|api|svc|service|backend|upstream|host|server|node|worker|broker|proxy|gateway|"
    r"primary|replica|master|slave|shard|cluster|consul|vault|etcd|zookeeper|nats|minio|"
    r"localhost|app|internal|oracle|mssql|cassandra"
)


def service_label(match: re.Match[str], word: str, context: Context) -> Replacement | None:
    """``name:port`` where group 1 names a service (``redis:6379``), not a word (``Note:12``)."""
    if not SERVICE_LABEL.search(match.group(1)):
        return None
    return None, word


def internal_url(match: re.Match[str], word: str, context: Context) -> Replacement | None:
    """A URL whose host (group 1) is internal: no dot, an IP address, or an internal name."""
    host = match.group(1).strip("[]").lower()
    if "." in host and ip_kind(host) is None and not context.internal_name(host):
        return None
    return None, word


#: after "connect to", words a sentence uses that are no host
WORDS_AFTER_CONNECT = frozenset(
    {"the", "a", "an", "server", "database", "host", "service", "upstream", "backend", "it"}
)


def dns_name(match: re.Match[str], word: str, context: Context) -> Replacement | None:
    """The host a resolver or connection error names (the first group that took part).

    Group 2 follows words prose also uses ("connect to"), so its name must look like a host.
    """
    group = next(g for g in (1, 2, 3, 4) if match.group(g) is not None)
    name = match.group(group)
    loose = group == 2 and "." not in name and not SERVICE_LABEL.search(name)
    if loose or name.lower() in WORDS_AFTER_CONNECT or ip_kind(name) is not None:
        return None
    whole = match.group(0)
    start = match.start(group) - match.start(0)
    end = match.end(group) - match.start(0)
    return None, whole[:start] + word + whole[end:]


_PATH_ROOTS = (
    r"usr|var|srv|opt|home|etc|app|apps|tmp|root|lib|lib64|proc|sys|mnt|data|code|workspace|"
    r"workspaces|Users|build|builds|go|src|dev|run|nix|snap|bin|sbin|private|Library|System|"
    r"Applications|www|deploy|deployments|u01|u02|export|docker|containers|vol|volumes|inetpub|"
    r"jenkins|runner|github|gitlab|secrets|certs|ssl|backup|backups|webapps|tomcat|rails|django|"
    r"laravel|gopath|workdir|host|layers|var_www|sandbox|scratch|shared|release|releases|current"
)
ROOT_PATH = re.compile(rf"^/(?:{_PATH_ROOTS})/")
#: "/data/attributes/qty" is a JSON:API pointer an agent needs, not a directory
JSON_API_POINTER = re.compile(
    r"^/data(?:/\d{1,9})?/(?:attributes|relationships|id|type|meta|links)(?:/|$)"
)
SOURCE_FILE = re.compile(rf"\.(?:{SOURCE_EXT})(?::\d{{1,6}}){{0,2}}$")
PATH_TELLTALES = (
    *("site-packages", "dist-packages", "node_modules", "/vendor/", "WEB-INF", "/.venv/"),
    *("/venv/", "/gems/", "/.m2/", "/.gradle/", "/.cargo/", "/.rustup/", "__pycache__"),
    *("/src/main/", "/bin/Debug", "/bin/Release", "/.bundle/", "/lib/python"),
)


def is_internal_path(path: str) -> bool:
    """A server path (a known root, a source file, a package directory), not a request path."""
    lone = path.count("/") < 2 and not path.startswith("~")
    if lone and not SOURCE_FILE.search(path):
        return False
    if JSON_API_POINTER.match(path):
        return False
    return bool(
        path.startswith("~/")
        or ROOT_PATH.match(path)
        or SOURCE_FILE.search(path)
        or any(sign in path for sign in PATH_TELLTALES)
    )


def internal_path(match: re.Match[str], word: str, context: Context) -> Replacement | None:
    """Replace check: the whole match is an internal path (``is_internal_path``)."""
    return (None, word) if is_internal_path(match.group(0)) else None


REPLACE_CHECKS: dict[str, Callable[[re.Match[str], str, Context], Replacement | None]] = {
    "internal_url": internal_url,
    "dns_name": dns_name,
    "ip_address": ip_address,
    "service_label": service_label,
    "internal_path": internal_path,
}


# --- cut checks -----------------------------------------------------------------------------------


def exception_class(line: str, match: re.Match[str]) -> int | None:
    """Start of the ``SomethingException``-like identifier whose suffix ``match`` is (not a bare
    word ``Error``)."""
    start = match.start()
    begin = start
    while (
        begin > 0
        and start - begin < 200
        and (line[begin - 1].isalnum() or line[begin - 1] in "_$.\\:")
    ):
        begin -= 1
    if begin < start and line[start - 1].isalnum():
        return begin
    return None


#: top-level domains: "example.com" at the end of a dotted name is a host, not a module
TLDS = frozenset(
    {
        *("com", "net", "org", "io", "dev", "app", "ai", "co", "uk", "de", "fr", "eu", "us"),
        *("ca", "au", "jp", "cn", "ru", "br", "in", "nl", "se", "no", "es", "it", "ch", "info"),
        *("biz", "me", "tv", "cloud", "gov", "edu", "mil", "int", "xyz", "tech", "online"),
        "site",
    }
)
MODULE_CONTEXT = re.compile(r"(?i)\b(?:module|named|import|package|from|in)\W{1,3}$")
#: a JVM package (reverse DNS) is code wherever it appears
PACKAGE = re.compile(
    r"(?:com|org|net|io|java|javax|jakarta|kotlin|kotlinx|scala|sun|jdk|akka|edu|gov|de"
    r"|fr|uk|nl|ch|ru|cn|jp|br|it|es|au|ca|be|dk|se|no|fi|pl|at)\.[a-z_]"
)


def module_reference(line: str, match: re.Match[str]) -> int | None:
    """A dotted lowercase name that is code: called, a JVM package, or named as a module.

    "orders.items.qty" is a field path an agent can use and is kept.
    """
    called = line.startswith("(", match.end()) or PACKAGE.match(match.group(0))
    named = MODULE_CONTEXT.search(line, max(0, match.start() - 24), match.start())
    if (called or named) and match.group(0).rsplit(".", 1)[-1].lower() not in TLDS:
        return match.start()
    return None


CUT_CHECKS: dict[str, Callable[[str, re.Match[str]], int | None]] = {
    "exception_class": exception_class,
    "module_reference": module_reference,
}


# --- prefix checks --------------------------------------------------------------------------------

#: exceptions whose message is about code (a key, an attribute, a null field), never the request
PROGRAMMING_ERRORS = frozenset(
    {
        *("KeyError", "AttributeError", "NameError", "IndexError", "UnboundLocalError"),
        *("ImportError", "ModuleNotFoundError", "RecursionError", "AssertionError"),
        *("NotImplementedError", "SyntaxError", "ZeroDivisionError", "ReferenceError"),
        *("TypeError", "NullPointerException", "NullReferenceException", "ClassCastException"),
        *("ArrayIndexOutOfBoundsException", "IndexOutOfBoundsException", "NoMethodError"),
        *("NoSuchMethodError", "NoSuchFieldError", "ClassNotFoundException", "LinkageError"),
        *("NoClassDefFoundError", "StackOverflowError", "OutOfMemoryError", "IllegalAccessError"),
        *("InvalidCastException", "IndexOutOfRangeException", "KeyNotFoundException"),
        *("ArgumentNullException", "UnsupportedOperationException"),
        *("ConcurrentModificationException", "ExceptionInInitializerError"),
        *("UninitializedPropertyAccessException", "NameErrorException"),
        *("FrozenError", "LocalJumpError", "ArgumentError", "SystemStackError", "ParseError"),
    }
)
EXC_NAME = re.compile(rf"\w{{0,100}}{EXC_SUFFIX}|\w{{1,100}}(?=\s{{0,3}}(?:\(|\[|:))")


def programming_error(prefix: str) -> bool:
    """An exception prefix ("KeyError: ") naming a programming error: drop its whole message."""
    name = EXC_NAME.search(prefix)
    return name is not None and name.group(0) in PROGRAMMING_ERRORS


PREFIX_CHECKS: dict[str, Callable[[str], bool]] = {"programming_error": programming_error}

#: a JSON error document's keys that name an exception class
CLASS_KEYS = frozenset(
    {"error", "exception", "type", "exc_type", "exceptiontype", "errortype", "name", "class"}
)


def names_programming_error(document: Any) -> bool:
    """``{"error": "KeyError", "message": "'flag'"}``: the document's message is about code."""
    if not isinstance(document, dict):
        return False
    for key, value in document.items():
        if str(key).lower() in CLASS_KEYS and isinstance(value, str):
            name = value.strip().replace("\\", ".").replace(":", ".").rsplit(".", 1)[-1]
            if name in PROGRAMMING_ERRORS:
                return True
    return False


# --- debug pages ----------------------------------------------------------------------------------


def is_debug_page(
    lowered: str, html_page: bool, signs: Sequence[str], markup_signs: Sequence[str]
) -> str | None:
    """The sign that makes ``lowered`` a framework debug page (``markup_signs`` count only in an
    HTML page, where a plain-text trace would otherwise be read line by line), or ``None``."""
    for sign in signs:
        if sign in lowered:
            return sign
    if html_page:
        for sign in markup_signs:
            if sign in lowered:
                return sign
    return None


ALL_CHECKS: dict[str, dict[str, Any]] = {
    "mask": dict(MASK_CHECKS),
    "replace": dict(REPLACE_CHECKS),
    "cut": dict(CUT_CHECKS),
    "prefix": dict(PREFIX_CHECKS),
}

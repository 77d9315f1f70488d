"""Redaction: nothing internal from an upstream reaches an agent (CONTRACT §3).

Interface used by the pipeline:

- ``Redactor.scrub(text)`` -> ``Scrubbed``: text fit for an agent. Stack traces, exception chains,
  paths, SQL, database driver messages, internal hosts and addresses, secrets and framework debug
  pages are cut; a useful sentence around them is kept. The output is short (a few sentences).
- ``Redactor.mask(text)`` -> ``Scrubbed``: text fit for the operator log. Only secrets are masked;
  traces, paths and hosts stay, because the operator needs them to debug.
- ``is_internal_header(name)``: response headers that reveal internals and are dropped on envelopes.

``Scrubbed.kinds`` holds one short stable label per family found (the ``kind`` label of
``mend_redactions_total``), deduplicated, in the fixed order of ``KINDS``.

Every pattern here is our own and reviewed: quantifiers are bounded or possessive so that no
pattern backtracks more than a constant amount per input position (upstream bodies are untrusted).
``scrub`` reads at most ``scan_limit`` characters, since its output is a few sentences from the
front of the text anyway; ``mask`` reads everything, so each of its patterns runs only when a
literal it needs is present.

How ``scrub`` says less: plain prose (short words, numbers) passes untouched without the full
pass; a JSON or XML error document is reduced to its message; a debug page becomes ``neutral``;
in a trace only the exception's own line may survive; secrets become ``[redacted]``; hosts,
addresses and paths become a neutral phrase ("an internal host"); SQL, driver messages, class
names and exception chains end the sentence at the clause that holds them. When nothing useful
is left, the result is ``neutral`` (pass ``neutral=""`` to let a caller fall back instead).
"""

from __future__ import annotations

import html
import ipaddress
import json
import math
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from proxy.nesting import exceeds_depth
from proxy.regex import GatedPattern, TriggerSet, anchored, gated

NEUTRAL = "The upstream service reported an internal error."

KINDS: tuple[str, ...] = (
    "debug_page",
    "stack_trace",
    "exception_chain",
    "exception_class",
    "file_path",
    "sql",
    "db_error",
    "connection_string",
    "internal_host",
    "private_address",
    "ip_address",
    "server_banner",
    "private_key",
    "jwt",
    "cloud_key",
    "credential_url",
    "secret",
)
_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}

_HOST_WORD = "an internal host"
_ADDRESS_WORD = "an internal address"
_PATH_WORD = "an internal path"
_DB_WORD = "an internal database"
_SERVICE_WORD = "an internal service"

# Words that, as the value of "password: ..." and friends, are prose rather than a secret.
_PROSE_VALUES = frozenset(
    {
        "must",
        "is",
        "was",
        "are",
        "be",
        "not",
        "no",
        "should",
        "cannot",
        "can",
        "too",
        "the",
        "a",
        "an",
        "invalid",
        "expired",
        "missing",
        "required",
        "empty",
        "null",
        "none",
        "nil",
        "true",
        "false",
        "undefined",
        "malformed",
        "revoked",
        "unknown",
        "incorrect",
        "wrong",
        "bad",
        "mismatch",
        "rejected",
        "denied",
        "present",
        "absent",
        "provided",
        "given",
        "ok",
    }
)
_TLDS = frozenset(
    {
        "com",
        "net",
        "org",
        "io",
        "dev",
        "app",
        "ai",
        "co",
        "uk",
        "de",
        "fr",
        "eu",
        "us",
        "ca",
        "au",
        "jp",
        "cn",
        "ru",
        "br",
        "in",
        "nl",
        "se",
        "no",
        "es",
        "it",
        "ch",
        "info",
        "biz",
        "me",
        "tv",
        "cloud",
        "gov",
        "edu",
        "mil",
        "int",
        "xyz",
        "tech",
        "online",
        "site",
    }
)
_SOURCE_EXT = (
    r"py|pyc|pyx|java|class|kt|kts|scala|groovy|clj|js|mjs|cjs|ts|tsx|jsx|vue|svelte|go|rs|rb|"
    r"erb|rake|php|phtml|inc|cs|vb|fs|cshtml|vbhtml|aspx|ascx|ashx|asmx|jsp|jar|war|ear|dll|exe|"
    r"so|dylib|c|h|cc|cpp|hpp|m|mm|swift|ex|exs|erl|hrl|pl|pm|lua|sh|bash|ps1|conf|cfg|ini|env|"
    r"yml|yaml|toml|properties|log|sock|pid|pem|key|crt|p12|pfx|jks|keystore|db|sqlite|sqlite3|"
    r"sql|lock|gemspec|twig|tpl|blade|pyi|pdb|csproj|sln|gradle|pom"
)
_PATH_ROOTS = (
    r"usr|var|srv|opt|home|etc|app|apps|tmp|root|lib|lib64|proc|sys|mnt|data|code|workspace|"
    r"workspaces|Users|build|builds|go|src|dev|run|nix|snap|bin|sbin|private|Library|System|"
    r"Applications|www|deploy|deployments|u01|u02|export|docker|containers|vol|volumes|inetpub|"
    r"jenkins|runner|github|gitlab|secrets|certs|ssl|backup|backups|webapps|tomcat|rails|django|"
    r"laravel|gopath|workdir|host|layers|var_www|sandbox|scratch|shared|release|releases|current"
)
_PATH_TELLTALES = (
    "site-packages",
    "dist-packages",
    "node_modules",
    "/vendor/",
    "WEB-INF",
    "/.venv/",
    "/venv/",
    "/gems/",
    "/.m2/",
    "/.gradle/",
    "/.cargo/",
    "/.rustup/",
    "__pycache__",
    "/src/main/",
    "/bin/Debug",
    "/bin/Release",
    "/.bundle/",
    "/lib/python",
)

_EXC_SUFFIX = r"(?:Exception|Error|Fault|Throwable|Panic)"
_PROGRAMMING_ERRORS = frozenset(
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
_WORDS_AFTER_CONNECT = frozenset(
    {"the", "a", "an", "server", "database", "host", "service", "upstream", "backend", "it"}
)

# Phrases only a framework's debug page (HTML or its plain-text twin) contains: such a body is
# replaced whole, because it dumps settings, environment and source next to the trace.
_DEBUG_PAGE_SIGNS = (
    "you're seeing this error because you have",
    "you&#39;re seeing this error because you have",
    "you&#x27;re seeing this error because you have",
    "django version:",
    "installed applications:",
    "installed middleware:",
    "request information:",
    "python executable:",
    "exception location:",
    "werkzeug debugger",
    "the debugger caught an exception in your wsgi application",
    "__debugger__",
    "whoops! there was an error",
    "whoops container",
    "window.ignite",
    "server error in '/",
    "server error in &#39;/",
    "an unhandled exception occurred while processing the request",
    "developer exception page",
    "rawexceptionstacktrace",
    "version information:",
    "asp.net is configured to show verbose error messages",
    "action controller: exception caught",
    "application trace",
    "framework trace",
    "rails.root:",
    "better_errors",
    "whitelabel error page",
    "powered by jetty",
    "xdebug-error",
    "symfony exception",
    "a php error was encountered",
    "phoenix.router.noroute",
)
# In a markup document these say "debug page" too; in plain text they are a trace, which the
# line-by-line pass handles.
_DEBUG_MARKUP_SIGNS = (
    "ignition",
    "illuminate\\",
    "apache tomcat",
    "exception report",
    "root cause",
    "stack trace:",
    "stacktrace",
    "call stack",
    "traceback (most recent call last)",
    "sf-dump",
    "exception-message",
    "play.api.",
    "backtrace",
    "caused by:",
    "nested exception is",
    "&nbsp;&nbsp;at ",
    "&nbsp; &nbsp;at ",
    "exception_value",
)


#: Short texts (field names, reasons, messages) are remembered with their result.
_CACHED_LENGTH = 256
_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class _Gated:
    """A pattern run only when one of its lowercase trigger substrings is present."""

    pattern: re.Pattern[str]
    triggers: tuple[str, ...]

    def search(self, subject: str, lowered: str) -> re.Match[str] | None:
        if not any(trigger in lowered for trigger in self.triggers):
            return None
        return self.pattern.search(subject)


_DB_WORDS = (
    *("relation", "column", "duplicate", "violat", "null value", "syntax", "deadlock", "serializ"),
    *("transaction", "authentication", "connect", "server", "too many", "slots", "database"),
    *("canceling", "too long", "invalid input", "operator", "permission denied", "sql", "table"),
    *("access denied", "lock", "child row", "incorrect", "invalid object", "conflicted", "login"),
    *("network", "constraint", "integrity", "pool", "jdbc", "query", "statement", "econn"),
    *("etimedout", "enotfound", "ehostunreach", "psycopg", "asyncpg", "pg8000", "alchemy", "pdo"),
    *("hibernate", "npgsql", "entityframework", "activerecord", "sequelize", "prisma", "typeorm"),
    *("knex", "mongo", "sqlite", "libpq", "odbc", "oledb", "dbapi", "redis", "jedis", "lettuce"),
    *("hikari", "c3p0", "liquibase", "flyway", "mariadb", "oracle", "no such", "entry"),
)
_SQL_WORDS = (
    *("select", "insert", "update", "delete", "merge", "replace", "upsert", "truncate", "create"),
    *("alter", "drop", "with", "where", "from", "values"),
)


@dataclass(frozen=True, slots=True)
class Scrubbed:
    text: str
    kinds: tuple[str, ...] = ()


def _ordered(kinds: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(kinds), key=lambda k: _KIND_ORDER.get(k, len(KINDS))))


def _entropy(token: str) -> float:
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def _ip_kind(candidate: str) -> str | None:
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


class Redactor:
    """Compiled once (patterns are built here) and shared by every request; holds no state."""

    def __init__(
        self, *, max_length: int = 300, neutral: str = NEUTRAL, scan_limit: int = 65_536
    ) -> None:
        self._cache: dict[str, Scrubbed] = {}
        self._max_length = max_length
        self._neutral = neutral
        self._scan_limit = scan_limit
        # object ids agents are meant to see (Stripe-style prefixes, UUIDs): never "random keys"
        self._public_id = re.compile(
            r"(?:ch|cus|pi|pm|seti|in|sub|prod|price|evt|txn|re|po|acct|card|src|file|si|cs|ii"
            r"|il|ba|py|tr|ipi|cn|dp|du|req|ord|inv|usr|org|prj|item|sku)_[A-Za-z0-9]{6,40}"
            r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        )
        # a bare host label that names a service ("orders-db", "redis", "api2"), not a word
        self._service_label = re.compile(
            r"(?i)[-_\d]|db|sql|redis|mongo|postgres|pg|maria|kafka|rabbit|mq|elastic|solr|cache|"
            r"memcache|api|svc|service|backend|upstream|host|server|node|worker|broker|proxy|gateway|"
            r"primary|replica|master|slave|shard|cluster|consul|vault|etcd|zookeeper|nats|minio|"
            r"localhost|app|internal|oracle|mssql|cassandra"
        )

        # --- secrets (scrub and mask) -------------------------------------------------------
        # Each entry: kind, pattern, the group to mask (0: the whole match; -1: the whole match
        # when it looks random) and triggers.
        # The triggers are lowercase substrings one of which every match contains: a pattern is
        # only run when one is present, which keeps ``mask`` cheap on large bodies.
        self._secrets: list[tuple[str, re.Pattern[str], int, tuple[str, ...]]] = [
            (
                "private_key",
                re.compile(
                    r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                    r"(?:[^-]|-(?!----END))*+(?:-----END[A-Z0-9 ]{0,40}-----)?"
                    r"|PuTTY-User-Key-File-\d: [^\n]{0,100}+(?:\n[^\n]{0,200}+){0,60}+"
                ),
                0,
                ("private key", "putty-user-key"),
            ),
            (
                # PHP traces print call arguments: the password is the third one
                "secret",
                re.compile(
                    r"(?i)(?:PDO->__construct|PDO::__construct|new PDO|mysqli->__construct"
                    r"|mysqli::__construct|mysqli_connect|mysql_connect|mysqli->real_connect"
                    r"|mysqli_real_connect)\(\s{0,3}(?:Object\([^)\n]{0,100}\),\s{0,3})?"
                    r"'[^'\n]{0,300}',\s{0,3}'[^'\n]{0,200}',\s{0,3}'([^'\n]{1,200})'"
                ),
                1,
                ("pdo", "mysql"),
            ),
            (
                "credential_url",
                re.compile(
                    r"(?i)\b[a-z][a-z0-9+.-]{1,30}://"
                    r"([^\s/@:\"'<>\[\]]{0,200}+(?::[^\s/@\"'<>]{0,200}+)?)@"
                ),
                1,
                ("://",),
            ),
            (
                # Oracle's "user/password@host" (JDBC thin and EZConnect)
                "credential_url",
                re.compile(r"(?i)\bjdbc:oracle:\w{1,10}:([^/@\s\"']{1,100}/[^@\s\"']{1,200})@"),
                1,
                ("jdbc:oracle",),
            ),
            ("jwt", re.compile(r"\beyJ[\w-]{6,}+\.[\w-]{6,}+(?:\.[\w-]*+){1,3}"), 0, ("eyj",)),
            (
                "cloud_key",
                re.compile(
                    r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\b"
                    r"|\bAIza[\w-]{35}\b|\bya29\.[\w-]{20,}+|\bGOOG[\w]{10,}+"
                ),
                0,
                (
                    *("akia", "asia", "abia", "acca", "agpa", "aida", "aipa", "anpa", "anva"),
                    *("aroa", "apka", "aiza", "ya29.", "goog"),
                ),
            ),
            (
                "secret",
                re.compile(
                    r"\b(?:sk|rk|pk)_(?:live|test|prod)_[0-9A-Za-z]{8,}+"
                    r"|\bwhsec_\w{10,}+|\bgh[pousr]_[A-Za-z0-9]{16,}+|\bgithub_pat_\w{20,}+"
                    r"|\bxox[abposre]-[\w-]{8,}+|\bxapp-[\w-]{10,}+|\bglpat-[\w-]{16,}+"
                    r"|\bsk-(?:proj-|ant-(?:api\d\d-)?|live-|svcacct-)?[\w-]{20,}+"
                    r"|\bSG\.[\w-]{16,}+\.[\w-]{16,}+|\bnpm_[A-Za-z0-9]{30,}+|\bpypi-[\w-]{20,}+"
                    r"|\bhf_[A-Za-z0-9]{20,}+|\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{20,}+"
                    r"|\bkey-[0-9a-f]{32}\b|\b(?:AC|SK)[0-9a-f]{32}\b|\bdop_v1_[a-f0-9]{40,}+"
                    r"|\bsq0(?:atp|csp)-[\w-]{20,}+|\bEAA[A-Za-z0-9]{30,}+|\bPMAK-[\w-]{20,}+"
                    r"|\bsecret_[A-Za-z0-9]{24,}+|\blin_api_\w{20,}+|\bATATT[\w-]{20,}+"
                    r"|\bxkeysib-[\w-]{20,}+|\bAKID[\w]{16,}+|\bnpm_\w{20,}+"
                    r"|\bhooks\.slack\.com/(?:services|workflows|triggers)/[\w/-]{10,}+"
                    r"|\bdiscord(?:app)?\.com/api/webhooks/\d{5,}/[\w-]{10,}+"
                    r"|\bhooks\.zapier\.com/hooks/catch/[\w/-]{6,}+"
                ),
                0,
                (),
            ),
            (
                # Authorization and Cookie header echoes: the whole value, to the end of line.
                "secret",
                re.compile(
                    r"(?i)\b(?:proxy-)?(?:authorization|set-cookie|cookie|x-api-key|x-auth-token"
                    r"|x-access-token|api-key)[\"']?\s{0,3}[:=]\s{0,3}+"
                    r"(\"[^\"\n]{0,2000}+\"|'[^'\n]{0,2000}+'|[^\n\"'<>}\]]{1,2000}+)"
                ),
                1,
                ("authorization", "cookie", "api-key", "auth-token", "access-token"),
            ),
            (
                "secret",
                re.compile(
                    r"(?i)\b(?:bearer|basic|digest|negotiate|ntlm|sso-key)\s{1,5}+"
                    r"([\w\-.~+/=:]{8,}+)"
                ),
                1,
                ("bearer", "basic", "digest", "negotiate", "ntlm", "sso-key"),
            ),
            (
                "secret",
                re.compile(
                    r"(?i)(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey"
                    r"|access[_-]?key|private[_-]?key|credentials?|signature|session[_-]?id"
                    r"|sessid|accountkey|sharedaccesskey|security[_-]?token|auth[_-]?key"
                    r"|jsessionid|phpsessid|connect\.sid|csrf)[\w.-]{0,40}+"
                    # a class name is not a key: "InvalidTokenException: token expired" is prose
                    r"(?<!exception)(?<!error)(?<!exceeded)[\"']?"
                    r"(?:\s{0,3}[:=]\s{0,3}+|>|\s{0,3}</t[dh]>\s{0,5}<t[dh][^<>]{0,100}>\s{0,5}+"
                    r"(?:<(?:pre|code)[^<>]{0,50}>)?)"
                    r"(\"[^\"\n]{1,500}+\"|'[^'\n]{1,500}+'|[^\s\"'&;,<>{}\[\]()]{1,500}+)"
                ),
                1,
                (
                    *("pass", "pwd", "secret", "token", "key", "credential", "signature"),
                    *("session", "sessid", "csrf", "connect.sid"),
                ),
            ),
            (
                "secret",
                re.compile(
                    r"(?i)[?&;](?:key|sig|code|auth|jwt|hash|st|se|sp|sv|x-amz-signature"
                    r"|x-amz-credential|x-goog-signature|x-goog-credential)=([^&\s\"'<>#]{1,2000}+)"
                ),
                1,
                ("=",),
            ),
            (
                # a long random-looking token of a format we don't know is a secret too
                "secret",
                anchored(
                    re.compile(r"(?<![\w+/-])[A-Za-z0-9_-]{24,512}+={0,2}(?![\w+/-])"),
                    r"[A-Za-z0-9_-]{24,}",
                ),
                -1,
                (),
            ),
        ]
        self._redacted_value = re.compile(r"^[\"']?(?:\w{1,20}\s)?\[(?:redacted|masked)")

        # --- connection strings (scrub: whole string) ---------------------------------------
        self._conn_url = re.compile(
            r"(?i)\b(?:jdbc:)?(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?"
            r"|mssql|sqlserver|oracle|db2|clickhouse|cockroachdb|cassandra|couchbase|neo4j|bolt"
            r"|nats|kafka|memcached?|elasticsearch|ldaps?|sqlite|snowflake|presto|trino|hive2?"
            r"|mongo|pg|postgis)(?:\+\w{1,20})?://[^\s\"'<>]{0,500}+"
            r"|\bjdbc:[a-z0-9]{1,20}:[^\s\"'<>]{0,500}+"
        )
        self._conn_kv = re.compile(
            r"(?i)\b(?:(?:server|data source|host|database|initial catalog|user id|uid|username"
            r"|password|pwd|port|accountname|accountkey|endpoint|sharedaccesskeyname"
            r"|sharedaccesskey|defaultendpointsprotocol|endpointsuffix|integrated security"
            r"|trusted_connection|encrypt|sslmode|provider|persist security info|dbname"
            r"|multipleactiveresultsets|connection timeout|application name|driver|addr|address"
            r"|network address)\s{0,3}=\s{0,3}[^;\n\"']{0,200}+;?\s{0,3}){2,40}+"
        )

        # --- hosts and addresses (scrub) ------------------------------------------------------
        self._url = re.compile(
            r"(?i)\b(?:https?|wss?|ftp|grpcs?|tcp|udp|unix|h2c?|thrift)://"
            r"(\[[0-9a-f:.%\w]{2,60}\]|[^\s/\"'<>?#:\[\]]{1,253}+)(?::\d{1,5})?[^\s\"'<>]{0,2000}+"
        )
        self._internal_suffix = re.compile(
            r"(?i)(?<![\w.+-])(?:[\w.+-]{1,64}@)?(?:[a-z0-9_-]{1,63}\.){0,10}[a-z0-9_-]{1,63}"
            r"\.(?:internal|local|localdomain|lan|corp|intranet|intra|private|home\.arpa|localhost"
            r"|consul|svc|cluster\.local|docker|k8s|kube|test|invalid|nip\.io|priv|infra|onprem"
            # cloud infrastructure: databases, caches, load balancers, app hosts
            r"|amazonaws\.com|windows\.net|azurewebsites\.net|cloudapp\.net|mongodb\.net"
            r"|herokuapp\.com|appspot\.com|run\.app|cloudfunctions\.net|supabase\.co"
            r"|neon\.tech|redis-cloud\.com|redislabs\.com|elastic-cloud\.com|cloud\.es\.io)"
            r"(?![\w-])(?::\d{1,5})?"
        )
        # host names a resolver or a connection error names: internal, whatever they look like
        # Group 1: a resolver's own words, after which any name is a host. Group 2: words a
        # sentence may also use ("connect to the server"), so the name must look like a host.
        # Group 3: "<name>: Name or service not known".
        _name = r"[\[(\"']?([a-z0-9][\w-]{0,62}+(?:\.[\w-]{1,63}+){0,10}+)"
        self._dns_host = re.compile(
            r"(?i)(?:\bdial\s{1,3}(?:tcp|udp)\s{1,3}"
            r"|could not translate host name\s|unknown host(?:exception)?:?\s{1,3}"
            r"|could not resolve(?: host)?:?\s{1,3}|name could not be resolved:?\s{1,3}"
            r"|getaddrinfo(?: \w{1,20})?\s{1,3}|\bhost\s{0,3}=\s{0,3})"
            + _name
            + r"|(?:\bconnect(?:ing|ion)?\s{1,3}to\s{1,3}(?:host\s{1,3})?|\breach(?:ing)?\s{1,3}"
            r"|\bresolv(?:e|ing)\s{1,3}|\bhost:\s{1,3})"
            + _name
            + r"|\b([a-z0-9][\w-]{0,62}+(?:\.[\w-]{1,63}+){0,10}+):\s{0,3}(?:name or service not"
            r" known|nodename nor servname|temporary failure in name resolution|no address assoc)"
            # Go's resolver: "lookup <name> on 10.96.0.10:53: no such host"
            r"|(?-i:\blookup)\s{1,3}" + _name + r"(?=\s{1,3}on\s|:\s)"
        )
        self._arn = re.compile(
            r"\barn:aws[\w-]{0,20}:[\w-]{0,40}:[\w-]{0,30}:\d{0,12}:[^\s\"'<>,;)]{1,500}"
        )
        self._localhost = re.compile(r"(?i)\blocalhost\b(?::\d{1,5})?")
        self._host_port = re.compile(
            r"(?i)(?<![\w.:/@-])([a-z][a-z0-9_-]{0,62}+):(\d{2,5})(?![\w.])"
        )
        self._ipv4 = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3})(?!\w|\.\d)(?::\d{1,5})?")
        self._ipv6 = re.compile(
            r"(?i)(?<![\w:.])\[?((?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[\w.]{1,20})?)\]?"
            r"(?::\d{1,5})?(?![\w:])"
        )

        # --- paths (scrub) -------------------------------------------------------------------
        self._win_path = re.compile(
            r"(?i)(?<![\w])[a-z]:[\\/](?:[^\\/\n\"'<>|*?:]{0,120}+[\\/]){0,40}+"
            r"[^\\/\s\"'<>|*?:,;()]{0,120}+(?::\d{1,6}|:line \d{1,6})?"
            r"|\\\\[\w.$-]{1,63}\\[^\s\"'<>|]{0,1000}+"
        )
        self._abs_path = re.compile(
            r"(?<![\w.~:/\\-])(?:~|/[\w.@+~-]{1,200}+)(?:/[\w.@+~$-]{0,200}+){0,60}+"
            r"(?::\d{1,6}(?::\d{1,6})?|\(\d{1,6}\))?"
        )
        self._root_path = re.compile(rf"^/(?:{_PATH_ROOTS})/")
        # "/data/attributes/qty" is a JSON:API pointer an agent needs, not a directory
        self._json_api_pointer = re.compile(
            r"^/data(?:/\d{1,9})?/(?:attributes|relationships|id|type|meta|links)(?:/|$)"
        )
        self._source_file = re.compile(rf"\.(?:{_SOURCE_EXT})(?::\d{{1,6}}){{0,2}}$")
        self._rel_path = re.compile(
            rf"(?<![\w./~\\-])(?:[\w.@+-]{{1,100}}+/){{1,30}}+[\w.@+-]{{0,100}}\.(?:{_SOURCE_EXT})"
            r"\b(?::\d{1,6}){0,2}"
            rf"|(?<![\w./\\-])[\w.-]{{1,100}}\.(?:{_SOURCE_EXT})"
            r"(?::\d{1,6}|\(\d{1,6}\)| line \d{1,6})"
            r"|\bfile:/{1,3}[^\s\"'<>]{1,1000}+"
        )
        # "... in /srv/x.php on line 9": once the path is gone, the locator says nothing
        self._where_path = re.compile(
            rf"\s(?:in|at|from)\s{{1,3}}{_PATH_WORD}(?:\s{{1,3}}on line \d{{1,6}})?(?=$|[.,;)])"
        )
        self._banner = re.compile(
            r"\b(?:Apache(?:-Coyote| Tomcat)?|nginx|openresty|Microsoft-IIS|Microsoft-HTTPAPI|Jetty"
            r"|Werkzeug|gunicorn|uvicorn|Kestrel|PHP|Python|CPython|Ruby|Java|OpenJDK|Node\.js|node"
            r"|OpenSSL|mod_\w{1,20}|Phusion_Passenger|Passenger|Puma|Unicorn|WEBrick|Tornado"
            r"|TornadoServer|Caddy|envoy|Envoy|Kong|kong|Varnish|lighttpd|LiteSpeed|Undertow"
            r"|WildFly|JBoss|GlassFish|WebLogic|WebSphere|Django|Flask|Rails|Laravel|Spring"
            r"|ASP\.NET|Cowboy|Tengine|Express|Servlet|JSP|Zope|Hypercorn|Daphne|Granian|waitress"
            r"|Mono|\.NET|Go|go|Kestrel|AmazonS3|awselb|CherryPy|TwistedWeb|Twisted|Jersey|Netty"
            r"|Restlet|Lucee|ColdFusion|Resin|GWS|BaseHTTP|SimpleHTTP)"
            r"(?:/| Version:?\s?| version\s)v?\d{1,4}(?:\.\d{1,6}){0,4}[\w.+-]{0,20}"
            r"(?:\s\([^)\n]{1,60}\))?"
            r"|\b(?:Version Information|Powered by|X-Powered-By)\b:?"
        )

        # --- whole lines of traces (scrub) ---------------------------------------------------
        self._trace_line = re.compile(
            r"^\s*at\s+\S.{0,1000}\(.{0,1000}\)\s*$"
            r"|^\s*at\s+(?:async\s+)?[^\s()]{1,500}:\d+(?::\d+)?\)?\s*$"
            r"|^\s+at\s+[\w$.<>\[\]`/:-]{1,500}\s*$"
            r"|^\s*at\s+[\w$.<>`]{1,300}\.[\w$<>`]{1,300}"
            r"|^\s*\.\.\.\s*\d+\s+(?:more|common frames omitted)"
            r"|^\s*Exception in thread \""
            r"|^Traceback \(most recent call last\)"
            r"|^\s*File \".{1,1000}\", line \d+"
            r"|^\s*[\^~]{2,}[\s\^~]*$"
            r"|^\s*(?:panic|fatal error):\s"
            r"|^\s*goroutine \d+ \["
            r"|^\s*created by\s"
            r"|^\s*[\w./*()\[\]@-]{1,300}\.[\w*()\[\].-]{1,300}\(.{0,500}\)\s*$"
            r"|^\s*\S{1,500}\.(?:go|s):\d+(?:\s+\+0x[0-9a-f]+)?\s*$"
            r"|^\s*\[signal \w+"
            r"|^\s*exit status \d+"
            r"|^\s*(?:from\s+)?\S{1,500}\.rb:\d+:in\s"
            r"|^\s*#\d+\s+\S"
            r"|^\s*(?:PHP\s+)?(?:Stack trace|Call Stack|Stacktrace|Stack Trace|Backtrace"
            r"|stack backtrace|Full Trace|Application Trace|Framework Trace):?\s*$"
            r"|^\s*thrown in\s"
            # a Rust frame names a path ("12: tokio::runtime::...") or an address, never prose
            r"|^\s*\d{1,4}:\s+(?:0x[0-9a-f]{1,16}\s+-\s+\S|[\w<>{}\[\]$.,&*'\"#-]{0,200}::"
            r"|rust_\w|__\w)"
            r"|^\s*note: (?:run with `RUST_BACKTRACE|Some details are omitted)"
            r"|^\s*thread '.{0,200}' panicked at"
            r"|^\s*--- End of (?:inner exception )?stack trace"
            r"|^\s*\([\w.]{1,100} [\d.]{1,20}\) .{1,500}:\d+:"
            r"|^\s*in\s+\S{1,500}\.(?:php|py|rb|js|ts)\b"
            r"|^\s*\S{1,500}\.(?:java|kt|scala|groovy):\d+\)?\s*$"
            r"|^\s*\S{1,500}\.(?:js|mjs|cjs|ts|py|rb|php):\d+\s*$"
            r"|^\s*(?:at\s+)?0x[0-9a-fA-F]{6,16}\b"
            r"|^\s*\*\* \(\w{1,100}\)"
            r"|^\s*(?:Stack|Trace|Backtrace|stack|trace)\s*[:=]"
        )
        self._chain_line = re.compile(
            r"^\s*(?:Caused by|Suppressed|Wrapped by|Nested exception|Inner exception)\b"
            r"|^\s*During handling of the above exception"
            r"|^\s*The above exception was the direct cause"
            r"|^\s*--->"
        )
        self._code_context = re.compile(r"^\s{2,}\S")
        self._python_trace = "Traceback (most recent call last)"

        # --- inline material that ends the useful part of a sentence (scrub) ------------------
        self._exc_prefix = re.compile(
            r"^\s*(?:PHP\s+)?(?:(?:Fatal error|Warning|Notice|Parse error|Catchable fatal error)"
            r":\s{1,5})?(?:Uncaught\s+|Unhandled\s+(?:exception|rejection)[.:]?\s{1,5})?"
            rf"(?:[\w$.\\:`]{{0,200}}{_EXC_SUFFIX}|[\w$`]{{1,100}}(?:(?:\.|\\|::)[\w$`]{{1,100}}){{1,30}}"
            r"|Error|Exception|panic)(?:\s{0,3}\[[^\]\n]{0,100}\])?(?:\s{0,3}\([^)\n]{0,100}\))?"
            r":\s{1,5}"
        )
        # The "_lower" patterns are matched against ``_ascii_lower(text)`` (same length, so the
        # same positions): case-insensitive alternations are several times slower in ``re``.
        self._chain_inline_lower = re.compile(
            r"\bcaused by\b|\bnested exception is\b|--->|\binner exception\b"
            r"|\bduring handling of the above exception|\bthe above exception was\b"
            r"|\bstack ?trace\b|\btraceback\b|\bbacktrace\b"
        )
        self._exc_name = re.compile(
            rf"\w{{0,100}}{_EXC_SUFFIX}|\w{{1,100}}(?=\s{{0,3}}(?:\(|\[|:))"
        )
        self._exc_suffix = re.compile(_EXC_SUFFIX + r"\b")
        self._code_ref = re.compile(
            r"\b(?:[a-z_$][\w$]{0,100}\.){1,30}[A-Z][\w$]{0,100}"
            r"|\b[A-Z][\w`$]{1,100}(?:\.[A-Z][\w`$]{1,100}){1,30}"
            r"|\b[A-Za-z_]\w{0,100}(?:::[A-Za-z_<][\w<>]{0,100}){1,30}"
            r"|\b[A-Za-z_]\w{0,100}(?:\\[A-Za-z_]\w{0,100}){1,30}"
            r"|\b(?:github|gitlab|bitbucket)\.(?:com|org)/[\w./*()-]{1,300}"
            r"|\(\*\w{1,100}\)|\b0x[0-9a-fA-F]{6,16}\b|\b[\w$]{1,100}\(\)"
            r"|\$\$Lambda|\$\$Enhancer|\blambda\$"
        )
        self._module_context = re.compile(r"(?i)\b(?:module|named|import|package|from|in)\W{1,3}$")
        # a JVM package (reverse DNS) is code wherever it appears
        self._package = re.compile(
            r"(?:com|org|net|io|java|javax|jakarta|kotlin|kotlinx|scala|sun|jdk|akka|edu|gov|de"
            r"|fr|uk|nl|ch|ru|cn|jp|br|it|es|au|ca|be|dk|se|no|fi|pl|at)\.[a-z_]"
        )
        self._dotted_lower = re.compile(r"\b[a-z_][\w$]{0,100}(?:\.[a-z_][\w$]{0,100}){2,30}")
        self._sql = re.compile(
            r"\b(?:SELECT|INSERT\s{1,5}INTO|UPDATE\s{1,5}\S{1,100}\s{1,5}SET|DELETE\s{1,5}FROM"
            r"|MERGE\s{1,5}INTO|REPLACE\s{1,5}INTO|UPSERT|TRUNCATE\s{1,5}TABLE"
            r"|(?:CREATE|ALTER|DROP)\s{1,5}(?:TABLE|INDEX|VIEW|SCHEMA|SEQUENCE|TRIGGER|UNIQUE)"
            r"|WITH\s{1,5}\w{1,60}\s{1,5}AS\s{0,5}\()\b"
        )
        self._sql_lower = re.compile(
            r"\bselect\s{1,5}(?:\*|distinct\b|count\s{0,3}\(|[\w\"`\[\]]{1,60}\.[\w\"`\[\]*]{1,60}"
            r"|[\w\"`]{1,60}\s{0,3},)"
            r"|\binsert\s{1,5}into\s{1,5}[\w.\"`\[\]]{1,100}"
            r"|\bupdate\s{1,5}[\w.\"`\[\]]{1,100}\s{1,5}set\s{1,5}[\w.\"`\[\]]{1,100}\s{0,3}="
            r"|\bdelete\s{1,5}from\s{1,5}[\w.\"`\[\]]{1,100}"
            r"|\bselect\s{1,5}[\w\"`]{1,60}\s{1,5}from\s{1,5}[\w.\"`\[\]]{1,100}"
            r"(?:\s{0,5}(?:;|$)|\s{1,5}(?:where|limit|order|group|join|inner|left|as|for)\b)"
            r"|\b(?:create|alter|drop)\s{1,5}(?:table|index|view|sequence|trigger)\s"
            r"|\bwhere\s{1,5}[\w.\"`\[\]]{1,100}\s{0,3}(?:=|<>|!=|\bin\s{0,3}\(|\blike\b"
            r"|\bis\s{1,5}(?:not\s{1,5})?null)"
            r"|\bfrom\s{1,5}[\w\"`\[\]]{1,60}\.[\w\"`\[\]]{1,60}\s{1,5}(?:where|join|as)\b"
            r"|\bvalues\s{0,3}\(\s{0,3}(?:\$\d|\?|:\w|%s)"
        )
        self._db_error = re.compile(
            r"\bORA-\d{5}\b|\bPLS-\d{5}\b|\bTNS-\d{3,5}\b|\bSQLSTATE\b|\bSQL\s?[Ss]tate\b"
            r"|\bMsg \d{1,6}, Level \d{1,3}, State \d{1,4}|\b(?:DETAIL|HINT|CONTEXT|STATEMENT"
            r"|LOCATION|QUERY):\s|\bFATAL:\s|\bERROR:\s{2}|\bERROR \d{4} \(\w{5}\)"
            r"|\(\d{4}, [\"']|\bE11000\b|\b(?:PG|Mysql2|SQLite3|Sequel|PDO)::|\bpq:\s"
        )
        self._db_error_lower = re.compile(
            r"\b(?:psycopg2?|asyncpg|pg8000|sqlalchemy|pymysql|mysqldb|mysql\.connector"
            r"|mysqli?|pdo|jdbc|hibernate|npgsql|sqlclient|entityframework\w{0,20}|activerecord"
            r"|sequelize|prisma|typeorm|knex|mongoose|mongoerror|mongoservererror|sqlite3?"
            r"|libpq|odbc|oledb|dbapi|redis\.exceptions|jedis|lettuce|hikari\w{0,20}"
            r"|c3p0|liquibase|flyway|mariadb|cx_oracle|oracledb)\b"
            r"|relation \"[^\"\n]{0,200}\" does not exist|column \"[^\"\n]{0,200}\""
            r"|duplicate key value violates"
            r"|violates (?:unique|foreign key|not-null|check|exclusion) constraint"
            r"|null value in column|syntax error at or near|deadlock detected"
            r"|could not serialize access|current transaction is aborted"
            r"|password authentication failed|could not connect to server|connection to server at"
            r"|is the server running|server closed the connection unexpectedly"
            r"|too many connections|remaining connection slots are reserved"
            r"|the database system is|canceling statement due to|value too long for type"
            r"|invalid input syntax for|operator does not exist"
            r"|permission denied for (?:table|relation|schema|database|sequence)"
            r"|you have an error in your sql syntax|duplicate entry '"
            r"|table '[^'\n]{0,200}' doesn't exist|unknown column '|access denied for user '"
            r"|mysql server has gone away|lost connection to mysql"
            r"|can't connect to (?:local )?mysql|deadlock found when trying"
            r"|lock wait timeout exceeded|cannot add or update a child row"
            r"|data too long for column|incorrect (?:integer|string|datetime|decimal) value"
            r"|invalid object name '|invalid column name '|cannot insert duplicate key"
            r"|violation of (?:primary|unique) key"
            r"|conflicted with the (?:foreign key|check|reference)|login failed for user"
            r"|a network-related or instance-specific error|no such table|no such column"
            r"|(?:unique|not null|foreign key|check) constraint failed|database is locked"
            r"|table or view does not exist|unique constraint \(|integrity constraint"
            r"|connection pool|jdbc connection|sql error|sql syntax|database error"
            r"|query failed|statement timeout|cannot connect to database|connection refused"
            r"|econnrefused|etimedout|enotfound|ehostunreach|econnreset"
        )
        # Plain prose (short words and numbers, light punctuation) cannot hold a path, host,
        # address, class name, key or frame; only words can start the other families. Such text
        # skips the full pass, which matters because scrub runs on every string of an envelope.
        self._plain = re.compile(
            r"\s*+(?:{token}(?:\s++{token})*+)?\s*+".replace(
                "{token}",
                r"\(?(?:[A-Za-z]{1,15}+|\d{1,6}+|[A-Z]{1,20}+(?:_[A-Z]{1,20}+){1,5}+)"
                r"[.,;:!?%)]{0,3}+(?!\S)",
            )
        )
        self._plain_words_lower = re.compile(
            r"\b(?:bearer|basic|digest|negotiate|ntlm|token|secret|password|passwd"
            r"|passphrase|pwd|cookie|authorization|session|sessid|credentials?|signature|csrf|key"
            r"|localhost|caused|nested|inner|traceback|backtrace|stack|trace|panic|panicked"
            r"|goroutine|thread|exception|fatal|uncaught|unhandled|thrown|detail|hint|context"
            r"|statement|location|query|version|powered|exit|note|lookup|getaddrinfo|resolve"
            r"|resolved|resolving|nodename|servname|resolution|dial|host|reach|reaching|connect"
            r"|connecting|connection|known)\b"
        )
        self._camel = re.compile(r"[a-z][A-Z]")
        self._markup = re.compile(
            r"(?i)<\s*(?:!doctype|html|head|body|title|div|p|pre|table|h\d"
            r"|br|span|center|hr|\?xml|soap|faultstring|script|style)\b"
        )
        self._block_tag = re.compile(
            r"(?i)<\s*(?:br|hr|p|div|tr|li|h\d|pre|table)\b[^<>]{0,2000}>"
            # any closing tag except inline ones: in XML every element is its own line
            r"|</\s*(?!(?:a|b|i|em|strong|span|code|small|abbr|font|u|sup|sub)\b)[\w:.-]{1,100}\s*>"
        )
        self._lone_name = re.compile(r"\s*['\"`][\w.$:-]{1,200}['\"`]\s*")
        self._html = re.compile(r"(?i)<\s*(?:!doctype\s+html|html|body)\b")
        self._xml_message = re.compile(
            r"(?is)<((?:[\w.-]{1,40}:)?(?:message|faultstring|errormessage|error_message|description"
            r"|error_description|detail|reason))\b[^<>]{0,200}>([^<]{1,2000}?)</\1\s*>"
        )
        self._tag = re.compile(r"<[^<>]{0,2000}>")
        self._ws = re.compile(r"[ \t\f\v\u00a0\u2000-\u200b\u3000]+")
        self._escapes = re.compile(r"\\r\\n|\\n|\\r|\\t")
        # Tried only where a run of separators starts, which the leftmost match always does, and
        # possessive: "+" then "*" over one class once took time cubic in a run (1,600 commas in
        # a line: 15 s), now linear.
        self._dangling = re.compile(
            r"(?i)(?<![\s,:;(\[\-\u2014\"'])[\s,:;(\[\-\u2014\"']++"
            r"(?:\b(?:at|in|on|to|from|by|with|for|of|via|due to"
            r"|because|while|when|the|a|an|and|or|into|using|near|after|caused by|reason|is|was"
            r"|are|were|be|error|errors|fatal|warning|warn|exception|panic|sql|query|detail|hint)\b)?"
            r"[\s,:;(\[\-\u2014\"']*+$"
        )

        # The patterns that cost most on real bodies (measured over the leak corpus and the
        # bench's error bodies) run behind RE2 gates: same results, a fraction of the time.
        for name in (
            "_db_error",
            "_dns_host",
            "_chain_inline_lower",
            "_db_error_lower",
            "_conn_url",
            "_conn_kv",
            "_dangling",
            "_public_id",
        ):
            setattr(self, name, gated(getattr(self, name)))
        self._secrets = [
            (kind, p if isinstance(p, GatedPattern) else gated(p), group, on)
            for kind, p, group, on in self._secrets
        ]
        self._triggers = TriggerSet([on for _, _, _, on in self._secrets])
        # a key block spans lines: it must go before the text is read line by line
        self._private_key = next(p for kind, p, _, _ in self._secrets if kind == "private_key")

        self._gates: tuple[tuple[str, _Gated, bool], ...] = (
            (
                "exception_chain",
                _Gated(
                    self._chain_inline_lower,
                    (
                        *("caused", "nested", "--->", "inner", "during handling"),
                        *("above exception", "stack", "traceback", "backtrace"),
                    ),
                ),
                True,
            ),
            ("sql", _Gated(self._sql, _SQL_WORDS), False),
            ("sql", _Gated(self._sql_lower, _SQL_WORDS), True),
            (
                "db_error",
                _Gated(
                    self._db_error,
                    (
                        *("ora-", "pls-", "tns-", "sql", "msg ", "detail", "hint", "context"),
                        *("statement", "location", "query", "fatal", "error", "(", "e11000", "::"),
                    ),
                ),
                False,
            ),
            ("db_error", _Gated(self._db_error_lower, _DB_WORDS), True),
        )

    # ------------------------------------------------------------------------------------------
    # mask: the operator log

    def mask(self, text: str) -> Scrubbed:
        """Mask secrets only; everything else (traces, paths, hosts) stays for the operator."""
        kinds: list[str] = []
        masked = self._mask_secrets(text, "[masked]", kinds)
        return Scrubbed(masked, _ordered(kinds))

    def _mask_secrets(self, text: str, token: str, kinds: list[str]) -> str:
        present = self._triggers.present(text.lower())
        for (kind, pattern, group, _), wanted in zip(self._secrets, present, strict=True):
            if wanted:
                text = pattern.sub(self._secret_replacer(kind, group, token, kinds), text)
        return text

    def _secret_replacer(
        self, kind: str, group: int, token: str, kinds: list[str]
    ) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            whole = match.group(0)
            if group == -1:
                if not self._looks_random(whole.rstrip("=")):
                    return whole
                kinds.append(kind)
                return token
            if group == 0:
                kinds.append(kind)
                return token
            value = match.group(group)
            bare = value.strip("\"'").strip()
            if (
                not bare
                or self._redacted_value.match(value)
                or bare.lower() in _PROSE_VALUES
                or (bare.isdigit() and len(bare) < 6)
            ):
                return whole
            start = match.start(group) - match.start(0)
            end = match.end(group) - match.start(0)
            quote = value[0] if value[0] in "\"'" and len(value) > 1 else ""
            kinds.append(kind)
            return whole[:start] + quote + token + quote + whole[end:]

        return replace

    def _looks_random(self, token: str) -> bool:
        """A long high-entropy token of letters and digits: a key of a format we don't know."""
        digits = sum(map(str.isdigit, token))
        if digits < 2:  # both shapes below need digits; class names in stack traces stop here
            return False
        if self._public_id.fullmatch(token):
            return False
        letters = sum(map(str.isalpha, token))
        mixed_case = any(c.isupper() for c in token) and any(c.islower() for c in token)
        if len(token) >= 24 and mixed_case and digits >= 2:
            return _entropy(token) >= 3.6
        return len(token) >= 32 and digits >= 4 and letters >= 4 and _entropy(token) >= 3.3

    # ------------------------------------------------------------------------------------------
    # scrub: what an agent may read

    def scrub(self, text: str) -> Scrubbed:
        """Cut everything internal; keep at most a short useful sentence (or a neutral one)."""
        if len(text) > _CACHED_LENGTH:
            return self._scrub(text)
        # errors repeat: the same field names, reasons and messages arrive again and again
        cached = self._cache.get(text)
        if cached is None:
            cached = self._scrub(text)
            if len(self._cache) >= _CACHE_SIZE:
                del self._cache[next(iter(self._cache))]  # oldest first: bounded, never grows
            self._cache[text] = cached
        return cached

    def _scrub(self, text: str) -> Scrubbed:
        if not text or self._is_plain(text):
            return Scrubbed(text)
        kinds: list[str] = []
        extracted = self._from_structured(text, kinds)
        if extracted is None:
            body = self._escapes.sub(self._unescape, self._bounded(text))
        else:
            body = self._bounded(extracted)
        markup = self._markup.search(body) is not None
        if self._is_debug_page(body, markup and self._html.search(body) is not None):
            kinds.append("debug_page")
            self._mask_secrets(body, "", kinds)
            return Scrubbed(self._neutral, _ordered(kinds))
        if markup:
            message = self._xml_message.search(body) if not self._html.search(body) else None
            body = self._strip_markup(body)
            if message:
                # an XML error document: its message element is the one thing worth reading;
                # what the rest held still counts for the metric
                self._scrub_text(body, kinds)
                body = html.unescape(self._strip_markup(message.group(2)))
        result = self._scrub_text(body, kinds)
        if not kinds and result == text:
            return Scrubbed(text)
        return Scrubbed(result or self._neutral, _ordered(kinds))

    def _is_plain(self, text: str) -> bool:
        return (
            len(text) <= self._max_length
            and self._plain.fullmatch(text) is not None
            and not self._camel.search(text)
            and not self._plain_words_lower.search(lowered := _ascii_lower(text))
            and not any(
                gate.search(lowered if on_lower else text, lowered)
                for _, gate, on_lower in self._gates
            )
        )

    @staticmethod
    def _unescape(match: re.Match[str]) -> str:
        return {"\\t": "\t", "\\r": "\n"}.get(match.group(0), "\n")

    def _bounded(self, text: str) -> str:
        if len(text) <= self._scan_limit:
            return text
        head = text[: self._scan_limit]
        # a secret cut in half would no longer look like one: end at the last complete line
        cut = head.rfind("\n")
        return head[:cut] if cut > 0 else head[: head.rfind(" ") if " " in head else 0]

    def _from_structured(self, text: str, kinds: list[str]) -> str | None:
        """A JSON body: its one message-like string, or ``""`` when it has none."""
        stripped = text.strip()
        if not stripped or stripped[0] not in "{[" or len(stripped) > 32 * self._scan_limit:
            return None
        if exceeds_depth(stripped):  # the stdlib parser recurses: deep text stays text
            return None
        try:
            document = json.loads(stripped)
        except ValueError:
            return None
        message = _message_of(document, 0)
        if message is not None and _names_programming_error(document):
            # {"error": "KeyError", "message": "'flag'"}: the message is about code
            kinds.append("exception_class")
            message = ""
        if message is None or message.strip() != stripped:
            # everything but the message is dropped; what it held still counts for the metric
            self._scrub_text(self._escapes.sub(self._unescape, self._bounded(stripped)), kinds)
        return "" if message is None else message

    @staticmethod
    def _is_debug_page(body: str, html_page: bool) -> bool:
        lowered = body.lower()
        return any(sign in lowered for sign in _DEBUG_PAGE_SIGNS) or (
            html_page and any(sign in lowered for sign in _DEBUG_MARKUP_SIGNS)
        )

    def _strip_markup(self, body: str) -> str:
        body = _cut_between(body, "<!--", "-->")
        for tag in ("script", "style", "textarea", "head"):
            body = _cut_element(body, tag)
        body = self._block_tag.sub("\n", body)
        body = self._tag.sub(" ", body)
        return html.unescape(body)

    def _scrub_text(self, text: str, kinds: list[str]) -> str:
        if "PRIVATE KEY" in text:
            text, found = self._private_key.subn("[redacted]", text)
            if found:
                kinds.append("private_key")
        kept: list[str] = []
        traced = False
        chained = False
        skip_context = False
        for original in text.replace("\r", "\n").split("\n"):
            raw = self._ws.sub(" ", original).strip()
            if not raw:
                skip_context = False
                continue
            if self._chain_line.match(raw):
                kinds.append("exception_chain")
                chained = True
                skip_context = False
                continue
            if self._trace_line.match(original):
                kinds.append("stack_trace")
                traced = True
                skip_context = True
                continue
            if skip_context and self._code_context.match(original):
                # the source line a Python or Node frame quotes
                skip_context = False
                continue
            skip_context = False
            if chained and traced:
                # the rest of a chain is the internal cause, not the agent's business
                continue
            if kept and raw == kept[-1]:
                continue
            if (traced or chained) and not self._exc_prefix.match(raw):
                # past the first frame, only an exception's own line may say something useful;
                # the rest of a dump (locals, settings, request data) may not
                continue
            kept.append(raw)
        python_first = self._python_trace in text
        if traced or chained:
            cleaned = [self._clean_line(line, kinds) for line in kept]
            candidates = [c for c in cleaned if len(c.split()) >= 2]
            if python_first:
                candidates.reverse()
            result = candidates[0] if candidates else ""
        else:
            # secrets first, line by line: a header echo's value runs to the end of its line,
            # and once lines are joined it would swallow the next one
            masked = (self._mask_secrets_scrub(line, kinds) for line in kept)
            result = self._clean_line(" ".join(masked), kinds)
        if self._lone_name.fullmatch(result):
            # a bare quoted identifier (a missing key, a field of the code) tells an agent nothing
            kinds.append("exception_class")
            return ""
        return self._cap(result)

    def _clean_line(self, line: str, kinds: list[str]) -> str:
        line = self._strip_exception_prefix(line, kinds)
        line = self._mask_secrets_scrub(line, kinds)
        line = self._conn_url.sub(self._tag_with("connection_string", _DB_WORD, kinds), line)
        line = self._conn_kv.sub(self._tag_with("connection_string", _DB_WORD, kinds), line)
        line = self._url.sub(self._internal_url(kinds), line)
        line = self._internal_suffix.sub(self._tag_with("internal_host", _HOST_WORD, kinds), line)
        line = self._dns_host.sub(self._dns_replacer(kinds), line)
        line = self._arn.sub(self._tag_with("internal_host", "an internal resource", kinds), line)
        line = self._localhost.sub(self._tag_with("internal_host", _HOST_WORD, kinds), line)
        line = self._ipv4.sub(self._ip_replacer(kinds), line)
        line = self._ipv6.sub(self._ip_replacer(kinds), line)
        line = self._host_port.sub(self._host_port_replacer(kinds), line)
        line = self._win_path.sub(self._tag_with("file_path", _PATH_WORD, kinds), line)
        line = self._abs_path.sub(self._abs_path_replacer(kinds), line)
        line = self._rel_path.sub(self._tag_with("file_path", _PATH_WORD, kinds), line)
        line = self._where_path.sub("", line)
        line = self._banner.sub(self._tag_with("server_banner", "", kinds), line)
        tidy = self._ws.sub(" ", line).strip()
        if tidy != line.strip():
            tidy = self._trim_dangling(tidy)
        return self._truncate(tidy, kinds)

    def _trim_dangling(self, text: str) -> str:
        """Drop what a cut leaves hanging at the end: separators, prepositions, log levels."""
        for _ in range(5):
            trimmed = self._dangling.sub("", text)
            if trimmed == text:
                break
            text = trimmed
        return text.strip()

    def _strip_exception_prefix(self, line: str, kinds: list[str]) -> str:
        for _ in range(10):
            match = self._exc_prefix.match(line)
            if not match:
                break
            kinds.append("exception_class")
            name = self._exc_name.search(match.group(0))
            if name and name.group(0) in _PROGRAMMING_ERRORS:
                # the message of a programming error is about code (a key, an attribute, a
                # null field), never about the request: nothing in it helps an agent
                return ""
            line = line[match.end() :]
        return line

    def _mask_secrets_scrub(self, line: str, kinds: list[str]) -> str:
        return self._mask_secrets(line, "[redacted]", kinds)

    @staticmethod
    def _tag_with(kind: str, word: str, kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            kinds.append(kind)
            # keep the whitespace the match swallowed, or the next word would glue to ours
            whole = match.group(0)
            before = " " if whole[:1].isspace() else ""
            after = " " if whole[-1:].isspace() else ""
            return before + word + after

        return replace

    def _internal_url(self, kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            host = match.group(1).strip("[]").lower()
            internal = (
                "." not in host
                or _ip_kind(host) is not None
                or self._internal_suffix.fullmatch(host) is not None
            )
            if not internal:
                return match.group(0)
            kinds.append("internal_host")
            return _SERVICE_WORD

        return replace

    def _dns_replacer(self, kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            group = next(g for g in (1, 2, 3, 4) if match.group(g) is not None)
            name = match.group(group)
            loose = group == 2 and "." not in name and not self._service_label.search(name)
            if loose or name.lower() in _WORDS_AFTER_CONNECT or _ip_kind(name) is not None:
                return match.group(0)
            kinds.append("internal_host")
            start = match.start(group) - match.start(0)
            end = match.end(group) - match.start(0)
            whole = match.group(0)
            return whole[:start] + _HOST_WORD + whole[end:]

        return replace

    @staticmethod
    def _ip_replacer(kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            candidate = match.group(1)
            kind = _ip_kind(candidate)
            tail = ""
            if kind is None and candidate.endswith(":") and match.group(0).endswith(candidate):
                # "fd00::1: refused": the colon is the message's, not the address's
                kind, tail = _ip_kind(candidate[:-1]), ":"
            if kind is None:
                return match.group(0)
            kinds.append(kind)
            return _ADDRESS_WORD + tail

        return replace

    def _host_port_replacer(self, kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            if not self._service_label.search(match.group(1)):
                return match.group(0)
            kinds.append("internal_host")
            return _HOST_WORD

        return replace

    def _abs_path_replacer(self, kinds: list[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            path = match.group(0)
            lone = path.count("/") < 2 and not path.startswith("~")
            if lone and not self._source_file.search(path):
                return path
            if self._json_api_pointer.match(path):
                return path
            if (
                path.startswith("~/")
                or self._root_path.match(path)
                or self._source_file.search(path)
                or any(sign in path for sign in _PATH_TELLTALES)
            ):
                kinds.append("file_path")
                return _PATH_WORD
            return path

        return replace

    def _truncate(self, line: str, kinds: list[str]) -> str:
        """Cut the line before the first internal detail, at the clause that holds it."""
        cut = len(line)
        for kind, position in self._first_internals(line):
            cut = min(cut, position)
            kinds.append(kind)
        if cut == len(line):
            return line
        head = line[:cut]
        boundary = max(
            head.rfind(sep)
            for sep in (
                ": ",
                " - ",
                " -- ",
                " \u2014 ",
                "; ",
                " (",
                ", ",
                ". ",
                "! ",
                "? ",
                " [",
                ' "',
                " '",
                " <",
                " {",
            )
        )
        head = head[: boundary + 1] if boundary >= 0 else ""
        head = self._trim_dangling(self._where_path.sub("", self._trim_dangling(head)))
        if len(head.split()) < 2:
            return ""
        return head if head[-1] in ".!?" else head + "."

    def _first_internals(self, line: str) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        lowered = _ascii_lower(line)
        for kind, gate, on_lower in self._gates:
            match = gate.search(lowered if on_lower else line, lowered)
            if match:
                found.append((kind, match.start()))
        match = self._code_ref.search(line)
        if match:
            found.append(("exception_class", match.start()))
        position = self._exception_class_at(line)
        if position is not None:
            found.append(("exception_class", position))
        for match in self._dotted_lower.finditer(line):
            # "orders.items.qty" is a field path an agent can use; a module is only cut when
            # it is called or named as one
            called = line.startswith("(", match.end()) or self._package.match(match.group(0))
            named = self._module_context.search(line, max(0, match.start() - 24), match.start())
            if (called or named) and match.group(0).rsplit(".", 1)[-1].lower() not in _TLDS:
                found.append(("exception_class", match.start()))
                break
        return found

    def _exception_class_at(self, line: str) -> int | None:
        """Start of the first ``SomethingException``-like identifier (not a bare word ``Error``)."""
        for match in self._exc_suffix.finditer(line):
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

    def _cap(self, text: str) -> str:
        text = self._ws.sub(" ", text).strip()
        if len(text) <= self._max_length:
            return text
        head = text[: self._max_length]
        end = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
        if head[-1] in ".!?":
            end = len(head) - 1
        if end >= self._max_length // 3:
            return head[: end + 1]
        space = head.rfind(" ", 0, self._max_length - 3)
        cut = head[:space] if space > 0 else head[: self._max_length - 3]
        return cut.rstrip(" ,;:") + "..."


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _ascii_lower(text: str) -> str:
    """Lowercase keeping every position (``str.lower`` may lengthen some non-ASCII letters)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _message_of(document: Any, depth: int) -> str | None:
    """The first message-like string of a JSON error document."""
    if depth > 4:
        return None
    if isinstance(document, str):
        return document
    if isinstance(document, list):
        for item in document[:3]:
            found = _message_of(item, depth + 1)
            if found:
                return found
        return None
    if not isinstance(document, dict):
        return None
    by_lower = {str(key).lower(): value for key, value in document.items()}
    for key in (
        "message",
        "error_description",
        "detail",
        "title",
        "msg",
        "errormessage",
        "error_message",
        "description",
        "reason",
        "faultstring",
        "status_message",
        "error",
        "errors",
        "fault",
        "statustext",
    ):
        value = by_lower.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, dict | list):
            found = _message_of(value, depth + 1)
            if found:
                return found
    return None


def _names_programming_error(document: Any) -> bool:
    if not isinstance(document, dict):
        return False
    for key, value in document.items():
        if str(key).lower() in _CLASS_KEYS and isinstance(value, str):
            name = value.strip().replace("\\", ".").replace(":", ".").rsplit(".", 1)[-1]
            if name in _PROGRAMMING_ERRORS:
                return True
    return False


_CLASS_KEYS = frozenset(
    {"error", "exception", "type", "exc_type", "exceptiontype", "errortype", "name", "class"}
)


def _cut_between(body: str, opener: str, closer: str) -> str:
    parts: list[str] = []
    position = 0
    while True:
        start = body.find(opener, position)
        if start < 0:
            parts.append(body[position:])
            return "".join(parts)
        parts.append(body[position:start])
        end = body.find(closer, start + len(opener))
        if end < 0:
            return "".join(parts)
        position = end + len(closer)


def _cut_element(body: str, tag: str) -> str:
    """Drop ``<tag ...>...</tag>`` elements, found by plain search so that it stays linear."""
    lowered = body.lower()
    parts: list[str] = []
    position = 0
    opener, closer = f"<{tag}", f"</{tag}"
    while True:
        start = lowered.find(opener, position)
        if start < 0:
            parts.append(body[position:])
            return "".join(parts)
        parts.append(body[position:start])
        end = lowered.find(closer, start + len(opener))
        if end < 0:
            return "".join(parts)
        close = lowered.find(">", end)
        position = len(body) if close < 0 else close + 1


_INTERNAL_HEADERS = frozenset(
    {
        "server",
        "x-powered-by",
        "x-aspnet-version",
        "x-aspnetmvc-version",
        "x-runtime",
        "x-served-by",
        "via",
        "x-varnish",
        "x-cache",
        "x-cache-hit",
        "x-cache-hits",
        "x-cache-status",
        "x-cache-lookup",
        "x-amzn-trace-id",
        "x-amz-trace-id",
        "x-amz-cf-id",
        "x-amz-cf-pop",
        "x-amz-id-2",
        "x-amz-apigw-id",
        "x-amzn-remapped-server",
        "x-request-start",
        "x-queue-start",
        "x-generator",
        "x-sourcefiles",
        "x-sourcemap",
        "sourcemap",
        "x-pingback",
        "x-redirect-by",
        "x-turbo-charged-by",
        "x-application-context",
        "x-forwarded-server",
        "x-forwarded-host",
        "x-real-ip",
        "x-original-host",
        "x-host",
        "x-hostname",
        "x-node",
        "x-server",
        "x-server-name",
        "x-instance-id",
        "x-pod-name",
        "x-container-id",
        "x-served-from",
        "x-origin-server",
        "x-real-server",
        "x-timer",
        "x-iinfo",
        "x-rack-cache",
        "x-php-version",
        "x-owa-version",
        "x-feserver",
        "x-beserver",
        "x-calculatedbetarget",
        "x-diaginfo",
        "x-github-backend",
        "x-cloud-trace-context",
        "x-appengine-resource-usage",
        "server-timing",
        "x-runtime-version",
        "x-framework",
        "x-engine",
        "x-mod-pagespeed",
        "x-page-speed",
        "x-envoy-upstream-service-time",
        "x-kong-upstream-latency",
        "x-kong-proxy-latency",
        "x-middleware-cache",
        "x-azure-ref",
        "x-msedge-ref",
    }
)
_INTERNAL_HEADER_PREFIXES = (
    "x-debug-",
    "x-debug",
    "x-backend-",
    "x-upstream-",
    "x-drupal-",
    "x-litespeed-",
    "x-envoy-",
    "x-kong-",
    "x-aspnet",
    "x-amzn-remapped-",
    "x-b3-",
    "x-datadog-",
    "x-newrelic-",
    "x-nginx-",
    "x-haproxy-",
    "x-apache-",
    "x-php-",
    "x-oracle-",
    "x-sap-",
    "x-db-",
    "x-sql-",
    "x-nextjs-",
    "x-vercel-",
    "x-middleware-",
    "x-magento-",
    "x-wp-",
    "x-wordpress-",
    "x-jenkins",
    "x-hudson",
    "x-symfony-",
    "x-laravel-",
    "x-django-",
    "x-rails-",
    "x-spring-",
    "x-tomcat-",
    "x-jboss-",
    "x-weblogic-",
    "x-websphere-",
    "x-iis-",
    "x-sharepoint-",
    "x-ms-server-",
    "x-internal-",
    "x-trace-",
    "x-profiler-",
    "x-xdebug-",
    "x-clockwork",
    "x-symfony",
    "x-cache-",
)


def is_internal_header(name: str) -> bool:
    """Headers naming the upstream's software, topology or timings: an agent needs none of them."""
    lowered = name.strip().lower()
    return lowered in _INTERNAL_HEADERS or lowered.startswith(_INTERNAL_HEADER_PREFIXES)

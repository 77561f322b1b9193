"""`redis`: a cache shared by a team or a cluster, on a Redis server (the `redis` package).

The server is `PIPEC_REDIS_URL` (default redis://127.0.0.1:6379/0); entries are
Redis strings under the key prefix `PIPEC_REDIS_PREFIX` (default
`pipec:compile:`), so `pipec cache clear` deletes pipec's entries and nothing
else. Every entry carries its sha256 and is checked on read like a local one.

Trust: a cached Program holds kernel source that runs when it is loaded, so anyone
who can write to the server can run code in every process that compiles through
it. The digests catch corruption, not a forger: use a server you control.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from .errors import CacheError

REDIS_URL_ENV = "PIPEC_REDIS_URL"
REDIS_PREFIX_ENV = "PIPEC_REDIS_PREFIX"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "pipec:compile:"


def redact(url: str) -> str:
    """The URL without its password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisCache:
    """Entries as Redis strings `<prefix><key>` on the server at `url` (see the module docstring);
    every method of the cache-backend protocol (pipec_ir.CacheAdmin), errors as CacheError."""

    name = "redis"

    def __init__(self, url: str | None = None, prefix: str | None = None, *, timeout: float = 3.0) -> None:
        self._url, self._prefix, self.timeout = url, prefix, timeout
        self._clients: dict[str, object] = {}

    @property
    def url(self) -> str:
        return self._url or os.environ.get(REDIS_URL_ENV) or DEFAULT_URL

    @property
    def prefix(self) -> str:
        return self._prefix if self._prefix is not None else os.environ.get(REDIS_PREFIX_ENV, DEFAULT_PREFIX)

    @property
    def location(self) -> str:
        return f"{redact(self.url)} (keys {self.prefix}*)"

    def _unreachable(self, exc: BaseException) -> CacheError:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        return CacheError(f"cache redis: cannot reach the Redis server at {redact(self.url)} ({detail}); "
                          f"start it, set {REDIS_URL_ENV}, or compile with --no-cache")

    def client(self):
        """A connected client for the current URL (checked with PING once per URL)."""
        url = self.url
        if url in self._clients:
            return self._clients[url]
        try:
            import redis
        except ImportError:
            raise CacheError("cache redis needs the `redis` package: pip install redis") from None
        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=self.timeout, socket_timeout=self.timeout)
            client.ping()
        except (redis.RedisError, OSError, ValueError) as exc:
            raise self._unreachable(exc) from None
        self._clients[url] = client
        return client

    def check(self) -> str:
        self.client()
        return self.location

    def _call(self, fn):
        import redis

        client = self.client()
        try:
            return fn(client)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._clients.pop(self.url, None)
            raise self._unreachable(exc) from None

    # ------------------------------------------------------------ the Cache protocol

    def get(self, key: str) -> bytes | None:
        return self._call(lambda c: c.get(self.prefix + key))

    def put(self, key: str, data: bytes) -> None:
        self._call(lambda c: c.set(self.prefix + key, data))

    # ------------------------------------------------------------ extras

    def delete(self, key: str) -> None:
        self._call(lambda c: c.delete(self.prefix + key))

    def _keys(self, client) -> list:
        return list(client.scan_iter(match=_glob_escape(self.prefix) + "*", count=1000))

    def info(self) -> dict:
        def run(c):
            keys = self._keys(c)
            pipe = c.pipeline(transaction=False)
            for k in keys:
                pipe.strlen(k)
            sizes = pipe.execute() if keys else []
            return {"backend": self.name, "location": self.location, "entries": len(keys),
                    "bytes": int(sum(sizes))}
        return self._call(run)

    def clear(self) -> int:
        def run(c):
            keys = self._keys(c)
            removed = 0
            for i in range(0, len(keys), 500):
                removed += c.delete(*keys[i:i + 500])
            return removed
        return self._call(run)


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)

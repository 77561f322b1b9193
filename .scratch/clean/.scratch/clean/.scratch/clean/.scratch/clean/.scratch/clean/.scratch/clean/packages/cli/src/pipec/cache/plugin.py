"""Entry point `cache = "pipec.cache.plugin"`: registers the built-in cache backends."""

from __future__ import annotations

import pipec_ir

from .local import LocalCache
from .redis_cache import RedisCache


@pipec_ir.hookimpl
def pipec_register(registry) -> None:
    registry.add_cache("local", LocalCache())
    registry.add_cache("redis", RedisCache())

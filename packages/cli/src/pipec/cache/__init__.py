"""The content-addressed compile cache.

The pipeline stores each stage's output document under the sha256 of (stage,
the implementation's name, distribution and version, `CompileOptions.key()`,
the input's digest) - see `keys.stage_key` - so a warm compile skips capture's
lowering, fusion and codegen. Backends are plugins (the `Cache` protocol of
pipec_ir: `get(key) -> bytes | None`, `put(key, data)`; optional `delete`,
`info`, `clear`, `check`, `location`), registered through `pipec_register`:
`local` (default, `PIPEC_CACHE_DIR`) and `redis` (`PIPEC_REDIS_URL`).
`CompileOptions.cache` picks one; "none" turns caching off.
"""

from .entry import BadEntry, pack_entry, unpack_entry
from .errors import CacheError, PipecCacheWarning
from .keys import graph_module_digest, shape_env_state, source_digest, stage_key, text_digest
from .local import CACHE_DIR_ENV, LocalCache, default_cache_dir
from .redis_cache import DEFAULT_URL as DEFAULT_REDIS_URL
from .redis_cache import REDIS_PREFIX_ENV, REDIS_URL_ENV, RedisCache
from .store import (DEFAULT_BACKEND, DISABLED, CompileCache, check_cache, device_checks_dir, open_cache,
                    resolve_cache_name)

__all__ = ["BadEntry", "CACHE_DIR_ENV", "CacheError", "CompileCache", "DEFAULT_BACKEND", "DEFAULT_REDIS_URL",
           "DISABLED", "LocalCache", "PipecCacheWarning", "REDIS_PREFIX_ENV", "REDIS_URL_ENV", "RedisCache",
           "check_cache", "default_cache_dir", "device_checks_dir", "graph_module_digest", "open_cache", "pack_entry",
           "resolve_cache_name", "shape_env_state", "source_digest", "stage_key", "text_digest", "unpack_entry"]

"""A Triton compile worker: a process that compiles kernels into Triton's on-disk cache.

Started by `compile_pool` as ``python -c <boot> <this file's package path...>``, it reads
requests from its stdin and answers on its stdout, each a length-prefixed pickle:
``(job_id, pickled request)`` in, ``(job_id, error or None, seconds, cache key)`` out (the
key Triton's compile computed here, in full: the parent compares it with its own). A request names the
kernel by its source file and function name and carries what `JITFunction.run` would have
handed `triton.compile` in the parent (signature, constexprs, attributes, options), the
parent's GPU target, Triton cache directory and cache-invalidating environment: the worker
compiles under the very cache key the parent's own launch computes, so that launch finds
the kernel in the cache. It needs no GPU and no tensors, and it imports only triton (never
torch, never CUDA: no GPU memory per worker).

It reads no environment variable of pipec's; it writes Triton's cache-invalidating ones
(to the parent's values) so that its compiles are the parent's.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import struct
import sys
import time

_HEADER = struct.Struct("<Q")


def send(stream, obj) -> None:
    """Write `obj` as one length-prefixed pickle and flush."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def recv(stream):
    """The next object `send` wrote, or None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # noqa: S301 - our own parent process writes this pipe


def set_cache_environment(env: dict[str, str]) -> None:
    """Make Triton's cache-invalidating environment variables exactly `env` (the parent's): they
    enter the cache key, and the compiler reads them while compiling."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    for name in set(get_cache_invalidating_env_vars()) - set(env):
        os.environ.pop(name, None)
    for name, value in env.items():
        os.environ[name] = value


def parents_ptxas(arch: int) -> tuple[str, str] | None:
    """(path, version text) of the ptxas this process's Triton uses for `arch`: the version as
    Triton cached it, which is what enters this process's cache keys. A process can switch
    ptxas after its workers started (Inductor points `TRITON_PTXAS_PATH` at torch's own ptxas
    when it first compiles), so each request carries the parent's. None off NVIDIA."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas, get_ptxas_version

        return get_ptxas(arch).path, get_ptxas_version(arch)
    except Exception:  # noqa: BLE001 - another backend, or a Triton that names these otherwise
        return None


def use_ptxas(ptxas: tuple[str, str] | None) -> None:
    """Compile with the parent's ptxas (`parents_ptxas`): its binary, and its version in the
    cache key, exactly as the parent's own compile would."""
    if ptxas is None:
        return
    path, version = ptxas
    import triton.backends.nvidia.compiler as nvidia

    os.environ["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = path
    nvidia.get_ptxas_version = lambda arch=80: version


def load_function(path: str, module_name: str, name: str, modules: dict):
    """The `@triton.jit` function `name` of the source file `path`, imported once per file under
    the parent's module name (what Triton hashes is the function's source and what it uses)."""
    module = modules.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        modules[path] = module
    return getattr(module, name)


def build_launcher(kernel, built: set, driver=None) -> bool:
    """Build `kernel`'s host launcher into Triton's cache as well; True when this call built one.

    Triton up to 3.6 launches each kernel through a C module made for its signature
    (`make_launcher`), compiled by the system's C compiler the first time a process loads a
    kernel of that signature (`CompiledKernel._init_handles`) and cached on disk under the
    source's hash. On a cold cache the parent's first call made one such C compile per
    distinct signature; here they run beside the kernels' own compiles, and the parent's load
    finds each in the cache. A Triton whose launcher is generic (no `make_launcher`) has
    nothing to build. Best effort: a failure leaves the build to the parent, as before.
    `built`: the launcher sources this worker built already (kernels of one signature share one)."""
    if driver is None:
        try:
            from triton.backends.nvidia import driver
        except ImportError:  # another backend
            return False
    if getattr(driver, "make_launcher", None) is None or not hasattr(driver, "CudaLauncher"):
        return False
    try:
        src = kernel.src
        constants = getattr(src, "constants", {})
        arg_index = {name: i for i, name in enumerate(src.fn.arg_names)}
        key = (tuple(sorted((repr(arg_index.get(k, k)), repr(v)) for k, v in constants.items())),
               tuple(src.signature.items()), repr(getattr(kernel.metadata, "tensordesc_meta", None)))
        if key in built:
            return False
        driver.CudaLauncher(src, kernel.metadata)  # compiles the C module into the cache (or finds it there)
        built.add(key)
        return True
    except Exception:  # noqa: BLE001 - the parent builds it on load, reporting any real error there
        return False


def compile_request(request: dict, modules: dict, launchers: set | None = None) -> str:
    """Compile one request into Triton's cache (`compile_pool.capture_requests` made it); -> the
    cache key (before hashing) it was compiled under, computed as `triton.compile` does. The
    kernel's launcher is built too (`build_launcher`; `launchers`: those built already)."""
    import triton
    import triton.runtime.cache
    from triton.backends.compiler import GPUTarget

    if (triton.__version__, os.path.abspath(triton.__file__)) != tuple(request["triton"]):
        raise RuntimeError(f"the compile worker imports triton {triton.__version__} from {triton.__file__}, "
                           f"the parent {request['triton'][0]} from {request['triton'][1]}")
    # the same installation: the parent's hash of it (Triton hashes every file of it, seconds of
    # work), as Triton's own compile warm-up pool does
    key = request["triton_key"]
    triton.runtime.cache.triton_key = lambda: key
    set_cache_environment(request["env"])
    use_ptxas(request.get("ptxas"))
    triton.knobs.cache.dir = request["cache_dir"]
    launchers = set() if launchers is None else launchers
    fn = load_function(request["path"], request["module"], request["name"], modules)
    src = ast_source_class(request.get("gluon", False))(fn, request["signature"], request["constants"],
                                                        request["attrs"])
    target = GPUTarget(*request["target"])
    kernel = triton.compile(src, target=target, options=request["options"])
    build_launcher(kernel, launchers)
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import make_backend

    return cache_key_text(src, make_backend(target), request["options"], get_cache_invalidating_env_vars())


def cache_key_text(src, backend, options: dict, env: dict) -> str:
    """Triton's cache key of compiling `src` with `backend` (Triton's for the target), `options`
    and cache-invalidating environment `env`, before it is hashed, computed as `triton.compile`
    does. The parent computes it for a request (`compile_pool.cache_entry`), a worker for what
    it compiled: its parts (Triton, source, backend with its ptxas, options, environment) show
    where the two part ways."""
    from triton.compiler import get_cache_key

    return get_cache_key(src, backend, backend.parse_options(dict(options, **src.parse_options())), env_vars=env)


def ast_source_class(gluon: bool):
    """The class `JITFunction.run` makes a kernel's source with: Gluon's for a Gluon kernel
    (the parent computes the cache key with the same class, `compile_pool.cache_entry`)."""
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    from triton.compiler import ASTSource

    return ASTSource


def serve(inp, out) -> None:
    """Answer requests until the parent closes our stdin."""
    modules: dict = {}
    launchers: set = set()
    while True:
        message = recv(inp)
        if message is None:
            return
        job_id, payload = message
        start = time.perf_counter()
        key = None
        try:
            key = compile_request(pickle.loads(payload), modules, launchers)  # noqa: S301 - see recv
            error = None
        except Exception as e:  # noqa: BLE001 - reported to the parent, which compiles it itself
            error = f"{type(e).__name__}: {str(e)[:2000]}"
        send(out, (job_id, error, time.perf_counter() - start, key))


def main() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the parent handles it; a worker
    # exits when the parent closes its stdin (or dies)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the protocol owns the real stdout; anything printed (a compiler's warning) goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ["TRITON_INTERPRET"] = "0"  # a kernel decorated here must be a JITFunction
    import triton.compiler  # noqa: F401 - before the first request
    serve(sys.stdin.buffer, out)


# the command line `compile_pool` starts a worker with: the parent's sys.path, then this module
BOOT = ("import sys; sys.path[:0] = sys.argv[1:]; "
        "from pipec_runtime_cudagraph.compile_worker import main; main()")

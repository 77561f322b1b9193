"""The `pipec` command (typer).

    pipec compile MODEL.py [--fusion NAME] [--runtime NAME] [--mode default|reduce-overhead|max-autotune|...]
                           [--dynamic] [--fullgraph] [--dump-ir DIR] [--output-code] [--json]
    pipec explain MODEL.py [same options]
    pipec bisect MODEL.py [same options] [--dtype D] [--repro-dir DIR] [--no-narrow] [--json]
    pipec minify MODEL.py [same options] [--dtype D] -o repro.py [--json]
    pipec report MODEL.py -o report.html [same options]   (one offline HTML page; docs/debugging.md)
    pipec bench MODEL.py [--fusion NAME] [--mode ...] [--no-inductor] [--inductor-mode MODE] [--pipec-mode MODE]
                         [--keep-going] [--json] [-o FILE]
    pipec capture MODEL.py -o graph.json [--exporter export|dynamo]
    pipec fuse graph.json -o plan.json [--fusion NAME]
    pipec codegen plan.json -o program.json [--codegen NAME]
    pipec export MODEL.py -o model.pipec [--dynamic] [--check] [--fusion NAME] [--json]
    pipec run model.pipec (--inputs FILE.safetensors | --random) [--json]
    pipec plugins
    pipec cache info|clear [--cache local|redis]

Exit codes: 0 success; 1 compile failure or numerical mismatch vs eager;
2 usage error (bad flag, missing file, unknown plugin name, bad IR file), always
with one line on stderr saying why. Environment: PIPEC_DISABLE_PLUGINS,
PIPEC_LOAD_PLUGINS (see pipec.plugins), PIPEC_DUMP_IR (default --dump-ir),
PIPEC_TRACEBACK=1 (print the full traceback of a compile failure), PIPEC_CACHE
(default --cache), PIPEC_CACHE_DIR and PIPEC_REDIS_URL (see pipec.cache), PIPEC_LOGS
(what each stage decides, on stderr: see pipec.logs).
"""

from __future__ import annotations

import os
import sys
import traceback

import typer

from .commands.bench import bench_cmd
from .commands.cache import cache_app
from .commands.compile import compile_cmd, explain_cmd
from .commands.debug import bisect_cmd, minify_cmd
from .commands.export import export_cmd, run_cmd
from .commands.plugins import plugins_cmd
from .commands.report import report_cmd
from .commands.stages import capture_cmd, codegen_cmd, fuse_cmd
from .exits import one_line, setup_warnings

app = typer.Typer(name="pipec", help="pipec: compile PyTorch models into fused Triton kernels.",
                  add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)


@app.callback()
def _main_callback() -> None:
    setup_warnings()


# the order of `pipec --help` (the command modules are in pipec/commands/)
for _name, _command in (("compile", compile_cmd), ("explain", explain_cmd), ("report", report_cmd),
                        ("bench", bench_cmd), ("bisect", bisect_cmd), ("minify", minify_cmd),
                        ("capture", capture_cmd), ("fuse", fuse_cmd), ("codegen", codegen_cmd),
                        ("export", export_cmd), ("run", run_cmd), ("plugins", plugins_cmd)):
    app.command(_name)(_command)
app.add_typer(cache_app)


def main(argv: list[str] | None = None) -> None:
    """The `pipec` console script: usage errors become one line on stderr and exit 2."""
    setup_warnings()
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="pipec", standalone_mode=False)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # click's ClickException / UsageError (typer vendors click in recent versions: match by shape)
        code = getattr(exc, "exit_code", None)
        if not (isinstance(code, int) and hasattr(exc, "format_message")):
            # a failure no command turned into its own line: still one line, the traceback on request
            if os.environ.get("PIPEC_TRACEBACK"):
                traceback.print_exc()
            print(f"error: {one_line(exc)} (unexpected; PIPEC_TRACEBACK=1 prints the traceback)", file=sys.stderr)
            sys.exit(1)
        message = exc.format_message()
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pipec`: the help text
            print(message, file=sys.stderr)
        else:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            print(f"error: {' '.join(message.split())}{hint}", file=sys.stderr)
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()

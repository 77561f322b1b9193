"""Test sessions: one per package (run in parallel with pytest-xdist), end-to-end, lint.

Sessions run in the environment made by `scripts/install.sh --dev` (no venv per session:
every package is installed there already, and torch is large).
"""

import sys

import nox

nox.options.sessions = ["lint", "ir", "capture", "fusion", "codegen", "runtime", "cli", "e2e", "opinfo"]
nox.options.reuse_existing_virtualenvs = True

PACKAGES = {
    "ir": "packages/ir",
    "capture": "packages/capture",
    "fusion": "packages/fusion",
    "codegen": "packages/codegen-triton",
    "runtime": "packages/runtime-cudagraph",
    "cli": "packages/cli",
}


def _pytest(session, path, *extra, workers="2"):
    # sys.executable: the interpreter nox runs in (.venv's), whatever PATH says
    args = [sys.executable, "-m", "pytest", "-q", "-n", workers, "-p", "no:cacheprovider", path, *extra,
            *session.posargs]
    session.run(*args)  # the runtime switches Triton's interpreter on by itself when there is no GPU


for _name, _path in PACKAGES.items():
    def _session(session, _path=_path):
        _pytest(session, f"{_path}/tests")

    _session.__doc__ = f"Tests of {_path}."
    nox.session(name=_name, python=False)(_session)


@nox.session(python=False)
def e2e(session):
    """Cross-stage tests: every example through the whole pipeline, CLI, plugins."""
    _pytest(session, "tests", "--ignore=tests/opinfo")


@nox.session(python=False)
def opinfo(session):
    """The OpInfo sweep: op_db samples through every stage, float32 on CPU (summary line at the end)."""
    _pytest(session, "tests/opinfo")


@nox.session(python=False)
def lint(session):
    """ruff over the whole tree."""
    session.run(sys.executable, "-m", "ruff", "check", ".")

"""Run Jupyter Book's Sphinx build of a book directly: ``python -m kvoffload.bookbuild.sphinx_run``.

``jupyter-book build SRC --path-output OUT -W -n --keep-going`` does three things: it parses its
command line (click) and the table of contents, turns ``_config.yml`` into a Sphinx
configuration (``jupyter_book.config.get_final_config``), and runs Sphinx with it. This module
does the last two exactly as ``jupyter_book.sphinx.build_sphinx`` 1.0 does for the html builder,
without the command-line layer, and leaves the process with ``os._exit`` once Sphinx has written
everything: a rebuild of one page spends no time importing click or tearing down the
interpreter's heap. The site it writes is the one ``jupyter-book build`` writes (a test builds
both and compares them). Started with ``--when-told``, it imports Sphinx and the extensions
while its caller is still preparing the pages, and builds when told to; told ``init`` first (the
configuration, table of contents, extensions and static files are in place, only pages may
still change), it also sets Sphinx up (extensions, theme, bibliography) before the pages exist.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

USAGE = "usage: python -m kvoffload.bookbuild.sphinx_run [--when-told] SOURCE_DIR OUTPUT_DIR"


def sphinx_config(src: Path, *, user_yaml: bool = True) -> dict:
    """Return the Sphinx configuration `jupyter-book build -n` makes of the book in ``src``.

    ``user_yaml=False``: Jupyter Book's defaults alone (no ``_config.yml`` read).
    """
    from jupyter_book.config import get_final_config

    # what `jupyter-book build` hands build_sphinx for a book with -n (nitpicky)
    overrides = {
        "external_toc_path": (src / "_toc.yml").as_posix(),
        "latex_individualpages": False,
        "nitpicky": True,
    }
    config, _ = get_final_config(
        user_yaml=src / "_config.yml" if user_yaml else None,
        cli_config=overrides,
        sourcedir=src,
        use_external_toc=True,
    )
    return config


def build(src: Path, out: Path) -> int:
    """Build the book in ``src`` into ``out/_build/html``; return Sphinx's status (0: success)."""
    with contextlib.ExitStack() as scope:
        app = setup(src, out, scope)
        app.build(False, [])
        return app.statuscode


def setup(src: Path, out: Path, scope: contextlib.ExitStack):
    """Return the Sphinx application for the book in ``src`` (docutils patched for ``scope``).

    Its documents are found again when it builds: pages written after this are built.
    """
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    config = sphinx_config(src)
    scope.enter_context(patch_docutils(None))
    scope.enter_context(docutils_namespace())
    return Sphinx(
        srcdir=src,
        confdir=None,
        outdir=out / "_build" / "html",
        doctreedir=out / "_build" / ".doctrees",
        buildername="html",
        confoverrides=config,
        status=None,
        warning=sys.stderr,
        freshenv=False,
        warningiserror=True,
        parallel=1,
        keep_going=True,
    )


WHEN_TOLD = "--when-told"  # import everything first, build only once "build" is read from stdin
INIT = "init"  # read before "build": set Sphinx up now, the book's pages aside, are in place


def preload(src: Path) -> None:
    """Import Sphinx and every extension the book's configuration names (errors left for later).

    Without a ``_config.yml`` yet (its caller may still be writing the book), the extensions
    every Jupyter Book build loads.
    """
    import importlib

    try:
        config = sphinx_config(src, user_yaml=(src / "_config.yml").is_file())
        for name in ["sphinx.application", "sphinx.builders.html", *config["extensions"]]:
            importlib.import_module(name)
    except Exception:  # the build itself reports whatever fails here
        return


def main(argv: list[str]) -> int:
    """Build the book named by ``argv`` (source, output); print a failure to stderr.

    With ``--when-told`` first, import Sphinx and the book's extensions, then wait: build when
    stdin gives the line ``build``, leave without building on anything else (or its end). A line
    ``init`` before it sets Sphinx up while the pages are still being written.
    """
    told = argv[:1] == [WHEN_TOLD]
    argv = argv[1:] if told else argv
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    src, out = Path(argv[0]).absolute(), Path(argv[1]).absolute()
    try:
        if not told:
            return build(src, out)
        preload(src)
        line = sys.stdin.readline().strip()
        with contextlib.ExitStack() as scope:
            app = setup(src, out, scope) if line == INIT else None
            if app is not None:
                line = sys.stdin.readline().strip()
            if line != "build":
                return 0
            app = app or setup(src, out, scope)
            app.build(False, [])
            return app.statuscode
    except Exception as exc:  # Sphinx's own errors: the caller shows the last lines of stderr
        import traceback

        traceback.print_exc()
        print(f"Error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # every file Sphinx wrote is closed; skip tearing down a large heap

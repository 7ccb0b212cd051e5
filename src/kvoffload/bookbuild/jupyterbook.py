"""Run a strict Jupyter Book build, refuse off-site assets, swap the new site in atomically."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from kvoffload.bookbuild.errors import BuildError
from kvoffload.bookbuild.sphinx_run import INIT, WHEN_TOLD

STAMP = ".kvoffload-inputs"  # in the site: the digest of the inputs it was built from
OFFSITE = re.compile(
    r"""<(?:script|link)\b[^>]*?(?:src|href)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE
)
# Font Awesome's 1.5 MB SVG script: the theme's stylesheet draws the same icons from its webfont
FONTAWESOME_JS = "_static/scripts/fontawesome.js"
_FONTAWESOME_TAG = re.compile(
    r'\s*<script\b[^>]*\bsrc="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*>\s*</script>'
)
# the search index (it grows with every page) is needed by the search page only: the theme loads
# it on every page for a search-as-you-type option the book leaves off
_SEARCH_TAGS = re.compile(
    r'\s*<script\b[^>]*\bsrc="[^"]*(?:_static/searchtools\.js|_static/language_data\.js'
    r'|searchindex\.js)[^"]*"[^>]*>\s*</script>'
)


# Sphinx adds "?v=<checksum>" to a stylesheet only when the file already sits in the output at
# the time a page is written: myst-nb's stylesheet does on an incremental build, not on a clean
# one. Its name already carries a hash of its content, so the query adds nothing but a
# difference between two builds of the same book.
_MYSTNB_CSS_QUERY = re.compile(r'(_static/mystnb\.[0-9a-f]+\.css)\?v=[0-9a-f]+"')


class WarmSphinx:
    """A Sphinx build process started early, used at most once (a context manager).

    It imports Sphinx and the book's extensions (more than a second) while the caller still
    prepares the pages, then builds when ``run`` tells it to; ``setup`` (once everything but the
    pages is in place) has it set Sphinx up ahead too. Left unused, or on an error or an
    interrupt, it is killed when the ``with`` block ends.
    """

    def __init__(self, src: Path, staging: Path) -> None:
        self.src, self.staging = src, staging
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> WarmSphinx:
        self.proc = subprocess.Popen(
            [*_SPHINX_RUN, WHEN_TOLD, str(self.src), str(self.staging)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return self

    def setup(self) -> None:
        """Have Sphinx set up now: the configuration, contents and static files are final."""
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # ended already: run() reports its error
                self.proc.stdin.write(f"{INIT}\n")
                self.proc.stdin.flush()

    def run(self, src: Path, staging: Path) -> subprocess.CompletedProcess[str]:
        """Tell the process to build ``src`` into ``staging`` (the paths it was started for)."""
        proc, self.proc = self.proc, None
        if proc is None or (src, staging) != (self.src, self.staging):
            if proc is not None:
                _kill(proc)
            return _sphinx(src, staging)
        out, err = proc.communicate("build\n")
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            _kill(self.proc)
            self.proc = None


_SPHINX_RUN = [sys.executable, "-m", "kvoffload.bookbuild.sphinx_run"]


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.communicate()


def _sphinx(src: Path, staging: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_SPHINX_RUN, str(src), str(staging)], capture_output=True, text=True, check=False
    )


def jupyter_book(src: Path, staging: Path, warm: WarmSphinx | None = None) -> None:
    """Run a strict Jupyter Book build of ``src`` into ``staging`` (slimmed); raise BuildError.

    Strict: a warning fails the build (``-W -n --keep-going``: every warning is reported). The
    build runs in a new process, ``kvoffload.bookbuild.sphinx_run``, which configures Sphinx as
    ``jupyter-book build`` does; ``warm`` is one started ahead for these paths.
    """
    proc = warm.run(src, staging) if warm is not None else _sphinx(src, staging)
    if proc.returncode != 0:
        log = (proc.stdout + proc.stderr).strip().splitlines()
        warnings = [ln for ln in log if "WARNING" in ln or "ERROR" in ln or "Error" in ln]
        detail = "\n".join((warnings or log)[-15:])
        raise BuildError(f"the Jupyter Book build failed (exit {proc.returncode}):\n{detail}")
    slim_site(staging / "_build" / "html")


def check_offline(html_dir: Path) -> list[str]:
    """Return pages that load a script or stylesheet from another host."""
    return [
        str(p.relative_to(html_dir))
        for p in sorted(html_dir.rglob("*.html"))
        if OFFSITE.search(p.read_text(encoding="utf-8", errors="replace"))
    ]


def slim_site(html_dir: Path) -> None:
    """Drop what no reader needs: source maps, Font Awesome's script, the index off the search page
    (and myst-nb's stylesheet query, which only an incremental build writes)."""
    for source_map in html_dir.rglob("*.map"):
        source_map.unlink()
    search_page = html_dir / "search.html"
    for page in html_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        slim = _MYSTNB_CSS_QUERY.sub(r'\1"', _FONTAWESOME_TAG.sub("", text))
        if page != search_page:
            slim = _SEARCH_TAGS.sub("", slim)
        if slim != text:
            page.write_text(slim, encoding="utf-8")
    (html_dir / FONTAWESOME_JS).unlink(missing_ok=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: a file system without exchange
        return False
    raise OSError(errno, os.strerror(errno), str(b))


def swap_in(new_html: Path, target: Path) -> None:
    """Replace ``target`` with ``new_html`` so that a reader never sees a half-written site.

    Where the file system can, the two folders are exchanged in one step, so ``target`` exists
    at every instant; elsewhere the old site is renamed aside first and put back on failure.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink() and _exchange(new_html, target):
        shutil.rmtree(new_html, ignore_errors=True)  # now the previous site
        return
    previous = target.with_name(target.name + ".previous")
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        target.rename(previous)
    try:
        new_html.rename(target)
    except OSError:
        if previous.exists():
            previous.rename(target)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def copy_site(built: Path, new: Path, published: Path) -> None:
    """Copy ``built`` to ``new``, linking each file the published site already holds unchanged.

    Sphinx rewrites its own files in place, so the new site never links into the staging tree;
    the published site is never written, only replaced whole, so a file it holds with the same
    size and modification time as the built one (copies keep the time) is shared by a hard link.
    """
    for folder, _, files in os.walk(built):
        rel = Path(folder).relative_to(built)
        (new / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            src, old, dst = Path(folder) / name, published / rel / name, new / rel / name
            s = src.stat()
            try:
                o = old.lstat()
                if stat.S_ISREG(o.st_mode) and (o.st_size, o.st_mtime_ns) == (
                    s.st_size,
                    s.st_mtime_ns,
                ):
                    os.link(old, dst)
                    continue
            except OSError:
                pass
            shutil.copy2(src, dst)


COMPLETE = ".kvoffload-complete"  # in a staging tree whose last Sphinx run finished


def build_and_swap(
    src: Path,
    staging: Path,
    target: Path,
    *,
    stamp: str | None = None,
    extra: Mapping[str, bytes] | None = None,
    structure: str | None = None,
    warm: WarmSphinx | None = None,
) -> None:
    """Build ``src`` in ``staging``, refuse off-site assets, then swap the result in as ``target``.

    With ``structure`` (a hash of what every page's navigation shows) the staging tree is kept
    between builds and Sphinx re-reads only the pages that changed; it starts clean when the
    structure changed or the last run did not finish. Without it every build starts clean.
    ``extra`` files (path under the site's root -> bytes, e.g. the calculator page) are written
    into the new site before it is checked and swapped in. ``warm``: a Sphinx process started
    ahead for ``src`` and ``staging``.
    """
    marker = staging / COMPLETE
    finished = marker.is_file() and marker.read_text(encoding="utf-8") == (structure or "")
    if structure is None or not finished:
        shutil.rmtree(staging, ignore_errors=True)
    marker.unlink(missing_ok=True)  # until this run finishes, the tree is not to be trusted
    jupyter_book(src, staging, warm)
    staging.mkdir(parents=True, exist_ok=True)
    marker.write_text(structure or "", encoding="utf-8")
    built = staging / "_build" / "html"
    new_html = target.with_name(target.name + ".new")
    shutil.rmtree(new_html, ignore_errors=True)
    copy_site(built, new_html, target)  # the staging tree stays Sphinx's, for the next build
    for rel, body in (extra or {}).items():
        path = new_html / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # never write through a link into the published site
        path.write_bytes(body)
    offsite = check_offline(new_html)
    if offsite:
        shutil.rmtree(new_html, ignore_errors=True)
        raise BuildError(
            f"pages load a script or stylesheet from another host: {', '.join(offsite[:5])}"
        )
    if stamp is not None:
        (new_html / STAMP).write_text(stamp)
    swap_in(new_html, target)

"""Run a strict Jupyter Book build, refuse off-site assets, swap the new site in atomically."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from kvoffload.build.errors import BuildError

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


def jupyter_book(
    src: Path, staging: Path, *, config: Path | None = None, toc: Path | None = None
) -> None:
    """Run a strict Jupyter Book build of ``src`` into ``staging`` (slimmed); raise BuildError."""
    cmd = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(src),
        "--path-output",
        str(staging),
        "-W",
        "-n",
        "--keep-going",
    ]
    if config:
        cmd += ["--config", str(config)]
    if toc:
        cmd += ["--toc", str(toc)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
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
    """Drop what no reader needs: source maps, Font Awesome's script, the index off the search page."""
    for source_map in html_dir.rglob("*.map"):
        source_map.unlink()
    search_page = html_dir / "search.html"
    for page in html_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        slim = _FONTAWESOME_TAG.sub("", text)
        if page != search_page:
            slim = _SEARCH_TAGS.sub("", slim)
        if slim != text:
            page.write_text(slim, encoding="utf-8")
    (html_dir / FONTAWESOME_JS).unlink(missing_ok=True)


def swap_in(new_html: Path, target: Path) -> None:
    """Replace ``target`` with ``new_html`` so that a reader never sees a half-written site."""
    target.parent.mkdir(parents=True, exist_ok=True)
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


def build_and_swap(
    src: Path,
    staging: Path,
    target: Path,
    *,
    stamp: str | None = None,
    extra: Mapping[str, bytes] | None = None,
) -> None:
    """Build ``src`` in ``staging``, refuse off-site assets, then swap the result in as ``target``.

    ``extra`` files (path under the site's root -> bytes, e.g. the calculator page) are written
    into the new site before it is checked and swapped in.
    """
    shutil.rmtree(staging / "_build" / "html", ignore_errors=True)
    jupyter_book(src, staging)
    new_html = staging / "_build" / "html"
    for rel, body in (extra or {}).items():
        path = new_html / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    offsite = check_offline(new_html)
    if offsite:
        raise BuildError(
            f"pages load a script or stylesheet from another host: {', '.join(offsite[:5])}"
        )
    if stamp is not None:
        (new_html / ".kvoffload-inputs").write_text(stamp)
    swap_in(new_html, target)

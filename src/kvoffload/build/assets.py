"""Offline assets: the vendored Vega bundle and MathJax, and the catalog's bibliography."""

from __future__ import annotations

import re
from pathlib import Path

from kvoffload.spec import catalog


def vendor_assets(static: Path) -> None:
    """Write the Vega bundle (wrapped so it cannot clash with Sphinx's globals) and MathJax."""
    import mathjax
    import vl_convert

    vendor = static / "vendor"
    (vendor / "mathjax").mkdir(parents=True, exist_ok=True)
    bundle = "(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n"
    write_if_changed(vendor / "vega-bundle.js", bundle)
    src = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg.js"
    write_if_changed(vendor / "mathjax" / "tex-svg.js", src.read_text(encoding="utf-8"))


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds it (unchanged files keep their mtime)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def catalog_bib(existing: str) -> str:
    """Return BibTeX entries for every registered source not already in references.bib."""
    taken = set(re.findall(r"@\w+\{([^,]+),", existing))
    entries = []
    for key, src in sorted(catalog.sources().items()):
        if key in taken:
            continue
        fields = {
            "title": "{" + _bib(src.get("title", key)) + "}",
            "note": f"Catalog source ({src.get('kind', 'unspecified')})",
        }
        if src.get("url"):
            fields["url"] = src["url"]
        if src.get("author"):
            fields["author"] = "{" + _bib(str(src["author"])) + "}"
        if src.get("year"):
            fields["year"] = str(src["year"])
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields.items())
        entries.append(f"@misc{{{key},\n{body}\n}}\n")
    return "\n".join(entries)


def _bib(text: str) -> str:
    return (
        text.replace("{", "")
        .replace("}", "")
        .replace("%", r"\%")
        .replace("&", r"\&")
        .replace("#", r"\#")
    )

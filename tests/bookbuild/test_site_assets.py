"""The site's weight and fonts without a build: the fallback fonts cover every Hangul character
and verdict mark the sources print, the post-build step drops source maps and the scripts no page
needs, and the Sphinx hook's tests for a chart or math on a page."""

from __future__ import annotations

import importlib.util
import re

import pytest

from kvoffload.bookbuild import assets
from kvoffload.bookbuild.jupyterbook import FONTAWESOME_JS, slim_site
from tests.support.paths import REPO

FONTS = REPO / "book" / "_static" / assets.FONTS


def _face_ranges(css: str) -> dict[str, set[str]]:
    """Return each @font-face family's characters, from its unicode-range."""
    faces = re.findall(r"@font-face\s*\{([^}]*)\}", css)
    out = {}
    for face in faces:
        family = re.search(r'font-family:\s*"([^"]+)"', face).group(1)
        out[family] = assets.parse_unicode_range(
            re.search(r"unicode-range:([^;]+);", face).group(1)
        )
    return out


def test_unicode_range_round_trips():
    chars = {"가", "각", "간", "힣", "✅", "\U0001f7e1", "a"}
    value = assets.unicode_range(chars)
    assert "U+AC00-AC01" in value  # consecutive code points merge into a run
    assert assets.parse_unicode_range(value) == chars


def test_the_vendored_fonts_cover_every_hangul_character_and_mark_the_sources_use():
    hangul, marks = assets.characters_needing_fonts(assets.book_texts(REPO))
    assert len(hangul) > 100  # the article's quotes
    faces = _face_ranges((FONTS / assets.FONTS_CSS).read_text(encoding="utf-8"))
    missing = (hangul - faces[assets.KOREAN_FAMILY]) | (marks - faces[assets.MARKS_FAMILY])
    assert not missing, (
        f"no vendored font draws {''.join(sorted(missing))}: run `make fonts` (or use a mark "
        "Noto Emoji has)"
    )


def test_the_fonts_are_small_woff2_files_with_their_licenses():
    css = (FONTS / assets.FONTS_CSS).read_text(encoding="utf-8")
    for name in (assets.KOREAN_FILE, assets.MARKS_FILE):
        data = (FONTS / name).read_bytes()
        assert data[:4] == b"wOF2", name
        assert len(data) < 200_000, name  # a subset, not the 6 MB font
        assert f'url("{name}")' in css
    licenses = sorted(p.name for p in FONTS.glob("OFL-*.txt"))
    assert licenses == ["OFL-NotoEmoji.txt", "OFL-NotoSansKR.txt"]
    for name in licenses:
        assert "SIL Open Font License" in (FONTS / name).read_text(encoding="utf-8")


def test_the_fallbacks_come_after_the_system_fonts():
    css = (FONTS / assets.FONTS_CSS).read_text(encoding="utf-8")
    base = re.search(r"--pst-font-family-base:([^;]+);", css).group(1)
    assert base.strip().startswith("var(--pst-font-family-base-system)")
    assert base.index("var(--pst-font-family-base-system)") < base.index(assets.KOREAN_FAMILY)


def test_slim_site_drops_maps_font_awesome_and_the_index_off_the_search_page(tmp_path):
    site = tmp_path / "html"
    (site / "_static" / "scripts").mkdir(parents=True)
    (site / "sub").mkdir()
    for name in ("bootstrap.js.map", "fontawesome.js", "fontawesome.js.map", "bootstrap.js"):
        (site / "_static" / "scripts" / name).write_text("x")
    head = (
        '<script defer src="{p}_static/scripts/fontawesome.js?digest=1"></script>\n'
        '<script src="{p}_static/searchtools.js"></script>\n'
        '<script src="{p}_static/language_data.js"></script>\n'
        '<script src="{p}searchindex.js"></script>\n'
        '<script defer src="{p}_static/scripts/bootstrap.js?digest=1"></script>\n'
    )
    (site / "index.html").write_text(head.format(p=""))
    (site / "sub" / "page.html").write_text(head.format(p="../"))
    (site / "search.html").write_text(head.format(p=""))

    slim_site(site)

    assert not list(site.rglob("*.map"))
    assert not (site / FONTAWESOME_JS).exists()
    assert (site / "_static" / "scripts" / "bootstrap.js").exists()
    for page in ("index.html", "sub/page.html"):
        text = (site / page).read_text()
        assert "fontawesome" not in text and "searchindex" not in text and "searchtools" not in text
        assert "bootstrap.js" in text
    search = (site / "search.html").read_text()
    assert "fontawesome" not in search
    assert "searchindex.js" in search and "searchtools.js" in search


@pytest.fixture(scope="module")
def ext():
    spec = importlib.util.spec_from_file_location(
        "kvoffload_sphinx", REPO / "book" / "_ext" / "kvoffload_sphinx.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_page_loads_vega_only_with_a_chart_and_mathjax_only_with_math(ext):
    chart = '<div id="kvo-chart-1" class="kvoffload-chart" role="img"></div>'
    inline = '<span class="math notranslate nohighlight">\\(x\\)</span>'
    display = '<div class="math notranslate nohighlight">\\[x\\]</div>'
    assert ext.uses_vega(chart) and not ext.uses_vega("<p>a table</p>")
    assert ext.has_math(inline) and ext.has_math(display)
    assert not ext.has_math('<section class="tex2jax_ignore mathjax_ignore"><p>text</p>')


def test_a_formatted_bibliography_entry_is_reused_only_for_the_same_entry_and_style(ext):
    from pybtex.database import Entry, Person
    from pybtex.plugin import find_plugin

    ext._remember_formatted_entries()
    alpha = find_plugin("pybtex.style.formatting", "alpha")()
    plain = find_plugin("pybtex.style.formatting", "plain")(abbreviate_names=True)

    def entry(title: str, author: str = "Ada Lovelace") -> Entry:
        e = Entry("misc", fields={"title": title, "year": "2024"}, persons={"author": [author]})
        e.persons["author"] = [Person(author)]
        e.key = "lovelace2024"
        return e

    def text(formatted) -> str:
        return formatted.text.render_as("text")

    class Env:
        pass

    app = type("App", (), {"env": Env()})()
    ext._take_formatted_entries(app)  # a first build: nothing kept from before
    first = alpha.format_entry("Lov24", entry("One"))
    assert "One" in text(first) and first.label == "Lov24"
    assert alpha.format_entry("Lov24", entry("One")) is first  # formatted once per build
    ext._take_formatted_entries(app)  # the next build starts from the last one's entries
    assert alpha.format_entry("Lov24", entry("One")) is first
    # anything the formatting depends on gives a new one: a field, a person, the label, the style
    assert "Two" in text(alpha.format_entry("Lov24", entry("Two")))
    assert "Babbage" in text(alpha.format_entry("Lov24", entry("One", "Charles Babbage")))
    assert alpha.format_entry("X", entry("One")).label == "X"
    assert text(plain.format_entry("Lov24", entry("One"))).startswith("A. Lovelace")
    assert text(first).startswith("Ada Lovelace")
    # a build keeps only what it formatted or reused
    ext._take_formatted_entries(app)
    alpha.format_entry("Lov24", entry("Two"))
    ext._take_formatted_entries(app)
    assert len(ext._MEMO["previous"]) == 1

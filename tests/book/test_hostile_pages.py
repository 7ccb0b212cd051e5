"""Text is text: strings from a profile are one line of plain text, escaped wherever they reach a
page; pages built by ``kvoffload run`` from a hostile profile fire no script and show no local file.
"""

from __future__ import annotations

import html
import json
import re
import secrets
import shutil
from html.parser import HTMLParser
from pathlib import Path

import msgspec
import pytest
import yaml

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import load_system
from kvoffload.inputs.text import (
    NAME_CHARS,
    NOTE_CHARS,
    PlainName,
    PlainText,
    Strict,
    markdown_text,
    plain_text,
    text_problem,
    validate,
)

# -- one line of plain text ---------------------------------------------------------------------
GOOD_NAMES = [
    "T4 16GB, PCIe 3.0 x16, GCP host (208 GB DRAM)",
    "RTX 3090 Ti 24GB (llama.cpp PR #4812 testbed)",
    "내 컴퓨터",
    "family 👨\u200d👩\u200d👧",  # emoji joined with U+200D
    "<script>alert(1)</script>",  # odd but one line: allowed, and escaped where shown
]
BAD_CHARS = {
    "newline": "\n",
    "carriage return": "\r",
    "tab": "\t",
    "NUL": "\x00",
    "escape": "\x1b",
    "DEL": "\x7f",
    "next line": "\x85",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "right-to-left override": "\u202e",
    "left-to-right isolate": "\u2066",
    "zero-width space": "\u200b",
    "byte order mark": "\ufeff",
}


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_plain_text_keeps_one_line_names(name):
    assert plain_text(name, field="name") == name
    assert text_problem(name, max_chars=NAME_CHARS) is None


@pytest.mark.parametrize("what", sorted(BAD_CHARS))
def test_plain_text_refuses_control_and_format_characters(what):
    with pytest.raises(InputError) as caught:
        plain_text(f"x{BAD_CHARS[what]}y", field="gpu.name")
    message = str(caught.value)
    assert message.startswith("gpu.name: holds a ")
    assert f"U+{ord(BAD_CHARS[what]):04X}" in message
    assert "\n" not in message


def test_plain_text_bounds_the_length():
    assert plain_text("x" * NAME_CHARS, field="name") == "x" * NAME_CHARS
    with pytest.raises(InputError, match=f"at most {NAME_CHARS}"):
        plain_text("x" * (NAME_CHARS + 1), field="name")
    assert plain_text("x" * NOTE_CHARS, field="note", max_chars=NOTE_CHARS)
    with pytest.raises(InputError, match="must be text, got int"):
        plain_text(5, field="name")


def test_schema_types_refuse_what_plain_text_refuses():
    class Part(Strict):
        name: PlainName
        note: PlainText = ""

    assert Part(name="ok", note="").name == "ok"
    for bad in [{"name": ""}, {"name": "a\nb"}, {"name": "x" * 121}, {"name": "a", "note": "\t"}]:
        with pytest.raises(ValueError):
            Part(**bad)
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, Part)
        with pytest.raises(InputError):
            validate(bad, Part)


# -- MyST Markdown escaping ---------------------------------------------------------------------
HOSTILE_MARKDOWN = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "x {include} /etc/hostname",
    "{raw}`html <script>alert(1)</script>`",
    "```{raw} html",
    ":::{include} /etc/hostname",
    "[a](javascript:alert(1))",
    "![i](x.png)",
    "<https://example.org>",
    "*em* _u_ **b** ~~s~~",
    "$x^2$ $$y$$",
    "\\begin{equation}x\\end{equation}",
    "# heading",
    "| a | b |",
    "- item",
    "+ item",
    "1. item",
    "2) item",
    "> quote",
    "(label)=",
    "% comment",
    "---",
    "+++",
    "&lt;b&gt; &#60;",
    "{{ substitution }}",
    "[^note]",
    "a\\b \\",
    "    indented",
    "T4 16GB, PCIe 3.0 x16 (llama.cpp PR #4812)",
]


def _myst_doctree(text: str):
    from docutils.core import publish_doctree
    from myst_parser.parsers.docutils_ import Parser

    settings = {
        "myst_enable_extensions": ["dollarmath", "amsmath", "colon_fence", "deflist"],
        "report_level": 5,
    }
    return publish_doctree(text, parser=Parser(), settings_overrides=settings)


@pytest.mark.parametrize("text", HOSTILE_MARKDOWN)
@pytest.mark.parametrize("where", ["{}", "Lead {} tail", "# On {}", "- {}"])
def test_markdown_text_renders_as_exactly_the_text(text, where):
    doc = _myst_doctree(where.format(markdown_text(text)))
    shown = where.removeprefix("# ").removeprefix("- ")  # a heading or list item's own text
    expected = shown.format(" ".join(text.split()))
    assert doc.astext() == expected
    made = {n.tagname for n in doc.findall()}
    allowed = {"document", "paragraph", "#text", "title", "section", "bullet_list", "list_item"}
    assert made <= allowed, made  # no raw HTML, literal, math, reference, include or target


def test_bullets_escape_each_note():
    from kvoffload.report import markdown

    shown = markdown.bullets(["{include} /etc/hostname", "<b>x</b>"], empty="none").data
    doc = _myst_doctree(shown)
    assert doc.astext() == "{include} /etc/hostname\n\n<b>x</b>"
    assert {n.tagname for n in doc.findall()} <= {
        "document", "bullet_list", "list_item", "paragraph", "#text",
    }  # fmt: skip


# -- HTML: tables, charts, captions, the verdict box --------------------------------------------
XSS = "<img src=x onerror=alert(1)>"
_TAG = re.compile(r"<(img|script|svg|iframe)\b", re.I)


def test_table_cells_and_headers_are_escaped():
    import pandas as pd

    from kvoffload.report import styling

    frame = pd.DataFrame({XSS: [XSS], "note": [f"see {XSS}"], "link": ["javascript:alert(1)"]})
    page = styling.show(frame, "t", notes=["note"]).to_html()
    assert not _TAG.search(page), page
    assert html.escape(XSS) in page
    assert 'href="javascript' not in page


def test_chart_json_and_caption_cannot_leave_their_script_or_text():
    import altair as alt
    import pandas as pd

    from kvoffload.report import charting

    name = "</script><script>alert(1)</script><!--"
    chart = (
        alt.Chart(pd.DataFrame({"x": [1], "name": [name]})).mark_point().encode(x="x", color="name")
    )
    figure = charting.figure_html(chart, "1.1", f"Caption for {XSS} `{name}`")
    assert figure.count("<script") == 1 and figure.count("</script>") == 1
    assert "<!--" not in figure and not _TAG.search(
        figure.replace('<script type="text/javascript">', "")
    )
    spec = figure.split("var spec = ", 1)[1].split(";\n", 1)[0]
    assert name in json.dumps(json.loads(spec))  # the same data, only spelled with \u escapes


HOSTILE_NAME = (
    "Box <script>alert('name')</script> {include} /etc/hostname <img src=x onerror=alert(2)>"
)


def test_verdict_box_escapes_the_machine_name():
    from kvoffload.report import verdict_box
    from kvoffload.studies import verdict

    system = load_system({"base": "t4-pcie3", "name": HOSTILE_NAME})
    box = verdict_box.verdict_html(verdict.verdict(system))
    assert not _TAG.search(box.replace("<span", "").replace("<strong", ""))
    assert html.escape(verdict_box.machine_label(HOSTILE_NAME)) in box


# -- validation through the command line --------------------------------------------------------
BASE = "base: t4-pcie3\n"
REFUSED = {
    "directive-in-name": (
        BASE + 'name: "x\\n```{include} /etc/hostname\\n```"\n',
        "name: holds a line break (U+000A",
    ),
    "raw-directive-in-description": (
        BASE + 'description: "ok\\n\\n:::{raw} html\\n<script>alert(1)</script>\\n:::"\n',
        "description: holds a line break",
    ),
    "tab-in-part-name": (BASE + 'gpu: {base: t4, name: "T4\\tx"}\n', "gpu.name: holds a control"),
    "nul-in-host-name": (
        BASE + 'host: {base: gcp-t4-host, name: "h\\0"}\n',
        "host.name: holds a control character (U+0000",
    ),
    "line-separator-in-storage-name": (
        BASE + 'storage: {base: nvme-gen4, name: "a\\u2028b"}\n',
        "storage.name: holds a line break (U+2028",
    ),
    "bidi-override-in-source": (
        BASE
        + 'link: {base: pcie3-x16, h2d_bandwidth: {value: 12 GB/s, kind: measured, source: "me \\u202e"}}\n',
        "link.h2d_bandwidth: source holds a control character (U+202E",
    ),
    "newline-in-note": (
        BASE + 'link: {base: pcie3-x16, h2d_bandwidth: {value: 12 GB/s, note: "a\\n# b"}}\n',
        "link.h2d_bandwidth: note holds a line break",
    ),
    "long-name": (BASE + f"name: {'x' * 121}\n", "name: is 121 characters long; at most 120"),
    "long-gpu-interface": (
        BASE + f"gpu: {{base: t4, interface: {'x' * 121}}}\n",
        "gpu.interface: is 121 characters long",
    ),
    "newline-in-skipped": (
        BASE + 'measurements: {skipped: ["GPU\\n```{include} /etc/hostname"]}\n',
        "measurements.skipped.0: holds a line break",
    ),
    "newline-in-notes": (
        BASE + 'measurements: {notes: ["ok", "a\\u2029b"]}\n',
        "measurements.notes.1: holds a line break (U+2029",
    ),
    "measurements-unknown-key": (
        BASE + "measurements: {tabels: {}}\n",
        "measurements.tabels: unknown field; did you mean 'tables'?",
    ),
    "measurements-unknown-table": (
        BASE + "measurements: {tables: {host_memroy: []}}\n",
        "measurements.tables.host_memroy: unknown field; did you mean 'host_memory'?",
    ),
    "measurements-row-unknown-key": (
        BASE
        + "measurements: {tables: {gpu_copies: [{bytes: 1024, pinned: true, h2d_gb_s: 10, d2h_gb_s: 10, when: now}]}}\n",
        "measurements.tables.gpu_copies.0.when: unknown field",
    ),
    "measurements-negative-rate": (
        BASE
        + "measurements: {tables: {storage_random_reads: [{request_bytes: 4096, queue_depth: 1, gb_s: -1, share_of_sequential: 0.1}]}}\n",
        "measurements.tables.storage_random_reads.0.gb_s: Input should be greater than 0",
    ),
    "measurements-absurd-rate": (
        BASE + "measurements: {tables: {host_memory: [{test: read, threads: 1, gb_s: 1.0e+9}]}}\n",
        "measurements.tables.host_memory.0.gb_s: Input should be less than or equal to 10000",
    ),
    "measurements-nan": (
        BASE
        + "measurements: {tables: {gpu_attention_step: [{placement: p, ms: .nan, layers: 1, tokens: 1}]}}\n",
        "measurements.tables.gpu_attention_step.0.ms: ",
    ),
    "measurements-text-for-number": (
        BASE + "measurements: {tables: {host_memory: [{test: read, threads: '8', gb_s: 10}]}}\n",
        "measurements.tables.host_memory.0.threads: Input should be a valid integer",
    ),
    "measurements-hostile-row-text": (
        BASE + 'measurements: {tables: {host_memory: [{test: "a\\n# b", threads: 1, gb_s: 1}]}}\n',
        "measurements.tables.host_memory.0.test: holds a line break",
    ),
    "measurements-not-a-list": (
        BASE + "measurements: {notes: a note}\n",
        "measurements.notes: Input should be a valid list",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_hostile_profile_is_refused_in_one_line(case, cli, write):
    text, fragment = REFUSED[case]
    path = write(f"{case}.yaml", text)
    r = cli("hardware", "validate", path)
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith(f"kvoffload: error: {path}: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert r.out == ""


def test_a_multi_line_directive_name_is_refused_by_the_shell_command(cli_process, write):
    path = write("directive.yaml", REFUSED["directive-in-name"][0])
    r = cli_process("hardware", "validate", path)
    assert r.code == 2 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert f"{path}: name: holds a line break" in r.err


def test_a_measured_profile_keeps_its_measurements_as_written():
    rows = [{"request_bytes": 4096, "queue_depth": 4, "gb_s": 0.5, "share_of_sequential": 0.2}]
    raw = {
        "base": "t4-pcie3",
        "measurements": {"tables": {"storage_random_reads": rows}, "notes": ["n"]},
    }
    system = load_system(raw)
    assert system.measurements == {"tables": {"storage_random_reads": rows}, "notes": ["n"]}
    assert load_system("t4-pcie3").measurements == {}


# -- pages built by `kvoffload run` from one profile that carries every hostile string ----------
def hostile_profile(secret_file: Path) -> dict:
    """Return a profile whose every string field tries to run script or include a local file."""
    inc = f"{{include}} {secret_file}"
    return {
        "id": "hostile-box",
        "name": "Box <script>alert('name')</script> `{include} /etc/hostname` <img src=x onerror=alert(2)>",
        "description": f"[d](javascript:alert('d')) {{raw}}`html <script>alert('d2')</script>` {inc}",
        "base": "t4-pcie3",
        "gpu": {
            "base": "t4",
            "name": "GPU <img src=x onerror=alert('gpu')> x {include} /etc/hostname",
            "memory_bandwidth": {
                "value": "300 GB/s",
                "kind": "measured",
                "source": f"<script>alert('source')</script> [s](javascript:alert('s')) {inc}",
                "note": "<svg onload=alert('note')></svg> $x$ {raw}`html <b onmouseover=alert(1)>b</b>`",
            },
        },
        "link": {
            "base": "pcie3-x16",
            "name": "{raw}`html <script>alert('link')</script>` ```{include} /etc/hostname",
            "h2d_bandwidth": {
                "value": "12 GB/s",
                "kind": "measured",
                "source": f"`{inc}` <iframe src=\"javascript:alert('iframe')\"></iframe>",
            },
        },
        "host": {
            "base": "gcp-t4-host",
            "name": ":::{include} /etc/hostname <a href=javascript:alert(3)>a</a>",
        },
        "storage": {"base": "nvme-gen4", "name": "# <details open ontoggle=alert('s')>"},
        "measurements": {
            "skipped": ["<script>alert('skipped')</script>", f"{inc} `{inc}`"],
            "notes": [
                "<img src=x onerror=alert('notes')>",
                "# {raw} html <script>alert('n2')</script>",
                "[x](javascript:alert('n3')) | a | b |",
            ],
            "tables": {
                "storage_random_reads": [
                    {
                        "request_bytes": s,
                        "queue_depth": q,
                        "gb_s": 0.1 * q,
                        "share_of_sequential": 0.05 * q,
                    }
                    for s in (4096, 1 << 20)
                    for q in (1, 4)
                ]
            },
        },
    }


class _Markup(HTMLParser):
    """Collect what in a page would run: script links and handlers, frames, scripts that alert."""

    def __init__(self) -> None:
        super().__init__()
        self.live: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag in ("iframe", "object", "embed"):
            self.live.append(tag)
        for name, value in attrs:
            value = (value or "").strip().lower()
            if (name.startswith("on") and "alert" in value) or value.startswith("javascript:"):
                self.live.append(f"{tag} {name}={value}")

    def handle_data(self, data: str) -> None:
        if self._tag == "script" and re.search(r"alert\(", data) and "var spec = " not in data:
            self.live.append(f"script {data[:80]}")  # a chart's JSON may hold the text as data


def _live_markup(page: str) -> list[str]:
    """Return the live markup in ``page``: tags, handlers and links that could run script."""
    parser = _Markup()
    parser.feed(page)
    return parser.live


def test_live_markup_is_found_only_where_it_lives():
    assert _live_markup("<p>x</p><img src=x onerror=alert(1)>") == ["img onerror=alert(1)"]
    assert _live_markup('<a href=" JavaScript:alert(1)">a</a>')
    assert _live_markup("<script>alert(1)</script>")
    assert not _live_markup("<p>&lt;img src=x onerror=alert(1)&gt; &lt;a href=javascript:x&gt;</p>")
    assert not _live_markup('<script>var spec = {"a": "\\u003cb onload=alert(1)"};</script>')


def test_the_hostile_profile_is_valid(tmp_path):
    """It is one line per string, so validation lets it through: the pages must escape it."""
    system = load_system(hostile_profile(tmp_path / ("deep" * 40) / "secret.txt"))
    assert "<script>" in system.name


def build_hostile_run(tmp: Path, root: Path) -> tuple[Path, str]:
    """Run chapters 01 and 09 for the hostile profile into ``tmp``/out; return (html, secret)."""
    from kvoffload.bookbuild.profile_run import MARKER, run_for_profile

    token = f"kvoffload-secret-{secrets.token_hex(8)}"
    secret = tmp / "secret.txt"
    secret.write_text(token + "\n", encoding="utf-8")
    profile = tmp / "hostile.yaml"
    text = yaml.safe_dump(hostile_profile(secret), allow_unicode=True)
    profile.write_text(text, encoding="utf-8")
    out = tmp / "out"
    result = run_for_profile(root, str(profile), chapter_keys=["01", "09"], out=out, progress=False)
    assert (out / MARKER).is_file() and (result.html / MARKER).is_file()
    return result.html, token


SEARCHES = ["Box", "alert", "hostname", "script"]  # search results show page and section titles


def check_hostile_pages(site: Path, token: str) -> None:
    """Assert that no page of ``site`` holds live markup or the secret, and that in Chromium no
    page, nor a search for the hostile names, opens a dialog."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import ARGS, Tab, require_chromium, serve

    chromium = require_chromium()
    pages = sorted(str(p.relative_to(site)) for p in site.glob("*.html"))
    assert {"index.html", "01_memory_tiers.html", "09_your_machine.html"} <= set(pages)
    hostname = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else ""
    for page in pages:
        text = (site / page).read_text(encoding="utf-8")
        assert token not in text, page
        assert not _live_markup(text), page
        if len(hostname) >= 8:  # a short one may occur in any page's text
            assert hostname not in text, page

    dialogs: list[tuple[str, str]] = []
    urls = pages + [f"search.html?q={q}" for q in SEARCHES]
    with serve(site) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            tab, at = Tab(browser), [""]
            tab.page.on("dialog", lambda d: (dialogs.append((at[0], d.message)), d.dismiss()))
            for url in urls:
                at[0] = url
                page, _, _ = tab.open(f"{base}/{url}")
                if url.startswith("search.html?"):
                    page.wait_for_selector(
                        "#search-results ul li, #search-results p", timeout=10_000
                    )
                page.wait_for_timeout(500)  # charts draw, search results fill in, after load
                body = page.inner_text("body")
                assert token not in body, url
                if url == "09_your_machine.html":  # the notes arrived, as text
                    assert "<script>alert(" in body and "<img src=x onerror=alert(" in body
                if url == "index.html":
                    assert page.locator("h1").first.inner_text().startswith("Box <script>alert(")
                if url == "search.html?q=Box":
                    assert page.locator("#search-results li").count() >= 1
                handlers = page.evaluate(
                    """() => [...document.querySelectorAll('*')].flatMap(e => [...e.attributes])
                        .filter(a => a.name.startsWith('on') && a.value.includes('alert')).length"""
                )
                assert handlers == 0, url
            tab.close()
        finally:
            browser.close()
    assert dialogs == []


@pytest.mark.slow
def test_pages_from_a_hostile_profile_fire_no_script_and_show_no_local_file(tmp_path):
    from tests.support.browser import require_chromium
    from tests.support.paths import copy_book_sources

    require_chromium()
    site, token = build_hostile_run(tmp_path, copy_book_sources(tmp_path / "src"))
    check_hostile_pages(site, token)
    shutil.rmtree(tmp_path / "out")

"""The verdict box and the Machines table: the package's numbers, escaped, one box per verdict."""

from __future__ import annotations

import re
from dataclasses import replace

from bs4 import BeautifulSoup

from kvoffload.report import verdict_box
from kvoffload.studies import verdict
from tests.support.verdicts import assert_box_shows


def test_the_box_shows_the_verdict_s_numbers():
    v = verdict.verdict("article-reference")
    html = verdict_box.verdict_html(v)
    assert_box_shows(html, v)
    soup = BeautifulSoup(html, "html.parser")
    box = soup.select_one(".verdict")
    assert box["data-profile"] == "article-reference" and box["data-context"] == "32000"
    text = box.get_text(" ", strip=True)
    assert "32,000 tokens of context" in text and "Llama 3.1 8B" in text
    assert "\n\n" not in html  # one HTML block: Markdown pages carry it as it is


def test_a_wrong_number_is_caught():
    v = verdict.verdict("article-reference")
    html = verdict_box.verdict_html(replace(v, offloaded_ms=v.offloaded_ms * 1.01))
    try:
        assert_box_shows(html, v)
    except AssertionError:
        return
    raise AssertionError("a box with another offloaded time passed")


def test_strings_from_a_profile_are_escaped():
    v = replace(verdict.verdict("article-reference"), system_name='<script>alert("x")</script>, b')
    html = verdict_box.verdict_html(v)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert BeautifulSoup(html, "html.parser").select("script") == []


def test_no_context_and_the_whole_window_are_said_in_words():
    t4 = verdict.verdict("t4-pcie3")
    assert "none (" in verdict_box.verdict_html(t4)
    gh = verdict.verdict("gh200-nvlink-c2c", verdict.Workload("llama-3.1-8b", 4_000))
    html = verdict_box.verdict_html(gh)
    if gh.longest_is_window:
        assert "whole 131,072-token window" in html
    assert "True" not in html and "inf" not in re.sub(r"<[^>]+>", "", html)


def test_machine_labels_are_short_and_balanced():
    assert (
        verdict_box.machine_label("T4 16GB, PCIe 3.0 x16, GCP host, NVMe")
        == "T4 16GB, PCIe 3.0 x16"
    )
    assert (
        verdict_box.machine_label("The article's figures (A100 80GB, PCIe 4.0, DDR5, NVMe Gen4)")
        == "The article's figures (A100 80GB, PCIe 4.0)"
    )
    assert verdict_box.machine_label("My box") == "My box"


def test_markdown_escaping_keeps_a_table_cell_whole():
    assert verdict_box.md_escape("a|b *c* [d] #4812") == r"a\|b \*c\* \[d\] \#4812"


def test_the_machines_table_has_one_row_per_machine_with_its_numbers():
    rows = [verdict.machine_row(i) for i in ("article-reference", "rtx-3070-ti-desktop")]
    table = verdict_box.machines_table(rows, lambda r: f"[{r.system_id}]")
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows)
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[0] == "[article-reference]" and cells[1] == f"{rows[0].link_gbs:,.1f}"
    gpu, off = cells[3].split(" / ")
    assert gpu == verdict_box.ms(rows[0].on_gpu_ms[1]) and off == verdict_box.ms(
        rows[0].offloaded_ms[1]
    )
    small = [c.strip() for c in lines[3].strip("|").split("|")]
    assert small[-2] == "none" and small[-1].startswith("no:")
    assert "True" not in table and "False" not in table


def test_the_answer_is_three_sentences_of_the_package_s_numbers():
    ref = verdict.verdict("article-reference")
    fast = verdict.verdict("gh200-nvlink-c2c")
    text = verdict_box.answer(ref, fast)
    assert len(re.findall(r"[.!?](?:\s|$)", text)) == 3
    for figure in (ref.gpu_ms, ref.offloaded_ms, fast.offloaded_ms):
        assert verdict_box.ms(figure) in text
    assert f"{ref.longest_offloaded:,}" in text and verdict_box.times(ref.ratio) in text


def test_a_chapter_s_answer_opens_the_box_and_the_generic_lines_fold_under_it():
    from kvoffload.studies.chapter_answers import Answer

    v = verdict.verdict("article-reference")
    a = Answer("One <b>layer</b> over the link", 16.42, "ms", "link_ms", "against 0.262 ms")
    html = verdict_box.verdict_html(v, a)
    soup = BeautifulSoup(html, "html.parser")
    box = soup.select_one(".verdict")
    first = box.find(["p", "ul", "details"], class_=lambda c: c != "verdict-head")
    assert first["class"] == ["verdict-answer"] and first["data-glue"] == "link_ms"
    assert box.select_one(".verdict-headline").get_text() == a.text == "16.4"
    assert "<b>" not in html and box.select_one("details .verdict-gpu-ms") is not None
    assert_box_shows(html, v)  # the generic figures are still the verdict's
    assert "\n\n" not in html
    none = Answer("Fastest engine that fits", float("nan"), "ms", "fastest_ms", "none fits")
    assert none.text == "none" and "nan" not in verdict_box.verdict_html(v, none)

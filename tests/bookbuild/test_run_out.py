"""``kvoffload run --out`` deletes nothing of the user's: it writes only into folders it made."""

from __future__ import annotations

import pytest

from kvoffload.bookbuild.profile_run import MARKER, claim_folder
from kvoffload.inputs.errors import InputError


def test_a_new_folder_is_made_and_marked(tmp_path):
    out = tmp_path / "a" / "b"
    claim_folder(out)
    assert (out / MARKER).is_file()
    claim_folder(out)  # a second run into its own folder is fine
    assert sorted(p.name for p in out.iterdir()) == [MARKER]


def test_an_empty_folder_is_taken_and_marked(tmp_path):
    claim_folder(tmp_path)
    assert (tmp_path / MARKER).is_file()


def test_a_folder_of_the_users_is_refused_and_left_as_it_was(tmp_path):
    mine = tmp_path / "thesis.tex"
    mine.write_text("years of work")
    with pytest.raises(InputError) as caught:
        claim_folder(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}: --out: this folder is not empty")
    assert MARKER in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.tex"]
    assert mine.read_text() == "years of work"


def test_an_html_folder_it_did_not_make_is_refused(tmp_path):
    (tmp_path / MARKER).write_text("made by kvoffload run\n")  # the folder is the tool's ...
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("the user's own page")  # ... but html/ is not
    with pytest.raises(InputError, match=f"{html}: --out: this page folder was not made"):
        claim_folder(tmp_path)
    assert (html / "index.html").read_text() == "the user's own page"
    (html / MARKER).write_text("made by kvoffload run\n")
    claim_folder(tmp_path)  # a page folder it made may be replaced


def test_a_file_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        claim_folder(path)
    assert path.read_text() == "x"


@pytest.mark.parametrize("existing", ["html/index.html", "report.pdf"])
def test_run_into_a_users_folder_exits_2_in_one_line_and_deletes_nothing(
    existing, cli_process, tmp_path
):
    out = tmp_path / "out"
    (out / existing).parent.mkdir(parents=True, exist_ok=True)
    (out / existing).write_text("keep me")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = cli_process("run", "--hardware", "t4-pcie3", "--chapter", "01", "--out", out, "--quiet")
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    assert lines[0].startswith(f"kvoffload: error: {out}: --out: "), lines[0]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert (out / existing).read_text() == "keep me"


def test_the_detected_profile_goes_into_a_folder_the_run_then_takes_as_its_own(tmp_path):
    """`run --hardware detect --out NEW` writes the profile into NEW: written before the folder
    was claimed, it made the run refuse its own folder as the user's."""
    from kvoffload.cli.book import _detected_file

    out = tmp_path / "new"
    path = _detected_file(out)
    assert path == str(out / "detected-profile.yaml") and (out / MARKER).is_file()
    claim_folder(out)  # what run_for_profile does next: its own folder, taken again


def test_run_detect_into_a_users_folder_or_outside_a_checkout_writes_nothing(
    cli_process, tmp_path, monkeypatch
):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = cli_process("run", "--hardware", "detect", "--chapter", "09", "--out", mine, "--quiet")
    assert r.code == 2 and f"{mine}: --out: this folder is not empty" in r.err, r.err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    monkeypatch.chdir(tmp_path)  # no checkout here
    r = cli_process("run", "--hardware", "detect", "--out", tmp_path / "out", "--quiet")
    assert r.code == 2 and "not inside a kvoffload checkout" in r.err, r.err
    assert not (tmp_path / "out").exists()

"""The chapter runner: warm kernels with clean namespaces, a cache keyed by code and verified on
every read, prose edits that execute nothing, failures that name the chapter's own cell."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from kvoffload.bookbuild import notebook_cache
from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.runner import Chapter, Job, run_jobs
from tests.support.chapters import write_chapter


def _job(root: Path, chapter: Chapter, profile: str = "p1") -> Job:
    return Job(
        chapter,
        profile,
        {"hardware": profile},
        root / "runs" / profile / f"{chapter.name}.ipynb",
    )


def _texts(path: Path) -> list[str]:
    """Return every stream output of the stored run, in order."""
    nb = nbformat.read(str(path), as_version=4)
    return [
        "".join(o.get("text", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") == "stream"
    ]


def test_a_name_set_by_one_job_is_absent_in_the_next_in_the_same_kernel(tmp_path):
    first = write_chapter(
        tmp_path, "01_first", "leaked = 41\nimport os\nos.chdir('/')", "print(leaked + 1)"
    )
    second = write_chapter(
        tmp_path,
        "02_second",
        "print('leaked' in globals(), 'hardware' in globals())",
        "import os\nprint(os.getcwd())",
    )
    jobs = [_job(tmp_path, first), _job(tmp_path, second)]
    outcomes = run_jobs(jobs, n_jobs=1, progress=False)  # one worker: one kernel runs both
    assert [o.status for o in outcomes] == ["executed", "executed"]
    assert _texts(jobs[0].out) == ["42\n"]
    # the first job's name is gone, the second's parameter is set, its folder restored
    assert _texts(jobs[1].out) == ["False True\n", f"{tmp_path / 'notebooks'}\n"]


def test_a_prose_edit_executes_nothing_and_a_code_edit_executes_again(tmp_path):
    chapter = write_chapter(tmp_path, "01_one", "import random\nprint(random.random())")
    job = _job(tmp_path, chapter)
    assert run_jobs([job], progress=False)[0].status == "executed"
    drawn = _texts(job.out)
    assert run_jobs([job], progress=False)[0].status == "cached"
    write_chapter(tmp_path, "01_one", "import random\nprint(random.random())", prose="New words.")
    again = run_jobs([job], progress=False)[0]
    assert again.status == "rendered"  # the stored outputs, under the new prose
    assert _texts(job.out) == drawn
    assert "New words." in job.out.read_text(encoding="utf-8")
    assert "Some prose." not in job.out.read_text(encoding="utf-8")
    write_chapter(
        tmp_path, "01_one", "import random\nprint(random.random() + 1)", prose="New words."
    )
    assert run_jobs([job], progress=False)[0].status == "executed"
    assert _texts(job.out) != drawn


def test_parameters_and_inputs_are_part_of_the_key(tmp_path):
    chapter = write_chapter(tmp_path, "01_one", "print(hardware)")
    one, two = _job(tmp_path, chapter, "p1"), _job(tmp_path, chapter, "p2")
    assert one.key() != two.key()
    run_jobs([one, two], progress=False)
    assert _texts(one.out) == ["p1\n"] and _texts(two.out) == ["p2\n"]
    user_file = tmp_path / "mine.yaml"
    user_file.write_text("a: 1\n")
    with_file = Job(chapter, "p1", {"hardware": "p1"}, one.out, (user_file,))
    before = with_file.key()
    user_file.write_text("a: 2\n")
    assert with_file.key() != before


def _tamper(path: Path, change) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    change(nb)
    path.write_text(json.dumps(nb), encoding="utf-8")


def _first_stream(nb: dict) -> dict:
    return next(o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"])


@pytest.mark.parametrize(
    "damage",
    [
        "edited output",
        "error output, resealed",
        "json but not a notebook",
        "truncated",
        "a directory",
    ],
)
def test_a_damaged_stored_run_is_executed_again_never_published(tmp_path, damage):
    chapter = write_chapter(tmp_path, "01_one", "print('genuine')")
    job = _job(tmp_path, chapter)
    run_jobs([job], progress=False)
    if damage == "edited output":
        _tamper(job.out, lambda nb: _first_stream(nb).update(text="forged\n"))
    elif damage == "error output, resealed":
        # even a correctly sealed notebook with an error output is not trusted
        nb = nbformat.read(str(job.out), as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.outputs)
        cell.outputs = [nbformat.v4.new_output("error", ename="E", evalue="v", traceback=[])]
        notebook_cache.seal(nb, job.key())
        nbformat.write(nb, str(job.out))
    elif damage == "json but not a notebook":
        job.out.write_text('{"cells": 3, "metadata": []}', encoding="utf-8")
    elif damage == "truncated":
        job.out.write_bytes(job.out.read_bytes()[:200])
    else:
        job.out.unlink()
        job.out.mkdir()
        (job.out / "x").write_text("x")
    if damage == "a directory":
        # nothing is written over a folder that is not ours; the job is named
        with pytest.raises(ChapterError, match="01_one, profile p1: IsADirectoryError"):
            run_jobs([job], progress=False)
        assert (job.out / "x").read_text() == "x"
        return
    assert run_jobs([job], progress=False)[0].status == "executed"
    assert _texts(job.out) == ["genuine\n"]


def test_a_failing_cell_is_named_as_the_chapter_numbers_it(tmp_path):
    chapter = write_chapter(
        tmp_path, "07_broken", "x = 1", "raise ValueError('deliberately\\nbroken')"
    )
    job = _job(tmp_path, chapter, "p9")
    with pytest.raises(ChapterError) as err:
        run_jobs([job], progress=False)
    message = str(err.value)
    # cells: 0 title and prose, 1 parameters, 2 'x = 1', 3 the raise (the injected cell is not one)
    assert message.startswith('chapter 07_broken, profile p9: cell 3 ("raise ValueError')
    assert "ValueError: deliberately broken" in message and "\n" not in message
    assert not job.out.exists()


def test_a_kernel_broken_by_a_chapter_is_replaced_for_the_next(tmp_path, monkeypatch):
    from kvoffload.bookbuild import kernels

    monkeypatch.setattr(kernels, "CELL_TIMEOUT_S", 5)
    # the kernel's own messages need json: after this cell it cannot even answer
    breaker = write_chapter(tmp_path, "01_breaker", "import json\njson.loads = json.dumps = None")
    after = write_chapter(tmp_path, "02_after", "print('ran')")
    jobs = [_job(tmp_path, breaker), _job(tmp_path, after)]
    with pytest.raises(
        ChapterError, match=r"01_breaker, profile p1: cell 2 .*no answer within 5 s"
    ):
        run_jobs(jobs, n_jobs=1, progress=False)  # one worker: the second job needs a new kernel
    assert _texts(jobs[1].out) == ["ran\n"]
    assert not jobs[0].out.exists()


def test_a_warm_kernel_gives_the_outputs_a_fresh_one_gives(tmp_path):
    before = write_chapter(
        tmp_path, "01_before", "import decimal\nstate = [1] * 5\ndef hardware_of():\n    return 1"
    )
    code = "import json\nprint(json.dumps({'a': hardware}), 'state' in dir(), 'decimal' in dir())\n[1, 2]"
    after = write_chapter(tmp_path, "02_after", code)
    warm = [_job(tmp_path, before, "w"), _job(tmp_path, after, "w")]
    cold = _job(tmp_path, after, "c")
    run_jobs(warm, n_jobs=1, progress=False)
    run_jobs([cold], n_jobs=1, progress=False)
    outputs = []
    for job in (warm[1], cold):
        nb = nbformat.read(str(job.out), as_version=4)
        cells = [
            c
            for c in nb.cells
            if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
        ]
        outputs.append([(c.execution_count, c.outputs) for c in cells])
    # the same counts and the same outputs, but for the parameter's value
    assert json.dumps(outputs[0]).replace('\\"w\\"', "P") == json.dumps(outputs[1]).replace(
        '\\"c\\"', "P"
    )


def test_only_the_newest_page_memos_are_kept_and_the_one_used_is_among_them(tmp_path):
    import os

    from kvoffload.bookbuild.pages import PAGE_MEMOS, keep_newest

    memos = [tmp_path / f"pages-{i:02d}.json" for i in range(PAGE_MEMOS + 4)]
    for i, path in enumerate(memos):
        path.write_text("{}")
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))  # memo i used at second i
    other = tmp_path / "calculator.json"  # another memo: never pruned here
    other.write_text("{}")
    os.utime(other, ns=(0, 0))
    keep_newest(tmp_path, "pages-*.json", memos[0], PAGE_MEMOS)  # the oldest, used again
    left = sorted(p.name for p in tmp_path.glob("pages-*.json"))
    assert len(left) == PAGE_MEMOS and memos[0].name in left
    # the rest are the newest ones
    assert left[1:] == [p.name for p in memos[-(PAGE_MEMOS - 1) :]]
    assert other.exists()

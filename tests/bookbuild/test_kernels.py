"""The warm kernels' start: Unix sockets (no TCP port to lose to another process), a private
folder removed when the kernel ends, and a start that fails quoting what the kernel wrote."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from kvoffload.bookbuild import kernels
from kvoffload.bookbuild.errors import ChapterError
from kvoffload.bookbuild.kernels import Kernel, KernelBroken
from kvoffload.bookbuild.runner import Job, run_jobs
from tests.support.chapters import write_chapter

# `python -m ipykernel_launcher` (the python3 kernelspec) finds a module of that name in the
# kernel's working folder first: this one fails as a broken install would
_BROKEN_LAUNCHER = (
    "import sys\nsys.stderr.write('no kernel here: a broken install\\n')\nsys.exit(3)\n"
)


@pytest.fixture
def private_tmp(monkeypatch):
    """A temporary folder of this test's own, so that what the kernels leave there is seen (in
    the system's, as a build's: pytest's own folders are too deep for Unix sockets)."""
    folder = Path(tempfile.mkdtemp(prefix="kvt-"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _cwd_of(kernel: Kernel) -> str:
    nb = new_notebook(cells=[new_code_cell("import os\nprint(os.getcwd())")])
    assert kernel.run(nb) is None
    return nb.cells[0].outputs[0]["text"].strip()


def test_a_kernel_talks_over_unix_sockets_and_leaves_nothing_behind(tmp_path, private_tmp):
    kernel = Kernel(tmp_path)
    try:
        assert kernel._km.transport == "ipc"
        (folder,) = private_tmp.iterdir()
        assert Path(kernel._km.connection_file).parent == folder
        assert sorted(p.name for p in folder.glob("kernel-ipc-*")) == [
            f"kernel-ipc-{i}" for i in range(1, 6)
        ]
        assert _cwd_of(kernel) == str(tmp_path)
    finally:
        kernel.close()
    assert not kernel.alive()
    assert list(private_tmp.iterdir()) == []


def test_a_socket_path_too_long_for_unix_sockets_falls_back_to_tcp(
    tmp_path, private_tmp, monkeypatch
):
    deep = private_tmp / ("d" * (kernels.MAX_IPC_PATH - len(str(private_tmp))))
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    kernel = Kernel(tmp_path)
    try:
        assert kernel._km.transport == "tcp"
        assert _cwd_of(kernel) == str(tmp_path)
    finally:
        kernel.close()
    assert list(deep.iterdir()) == []


def test_a_kernel_that_cannot_start_is_refused_quoting_what_it_wrote(tmp_path, private_tmp):
    (tmp_path / "ipykernel_launcher.py").write_text(_BROKEN_LAUNCHER)
    with pytest.raises(KernelBroken, match=r"the kernel did not start .*a broken install"):
        Kernel(tmp_path)
    assert list(private_tmp.iterdir()) == []


def test_a_chapter_whose_kernel_cannot_start_fails_naming_the_chapter_and_the_cause(
    tmp_path, private_tmp
):
    chapter = write_chapter(tmp_path, "03_unlucky", "print('never')")
    (chapter.path.parent / "ipykernel_launcher.py").write_text(_BROKEN_LAUNCHER)
    job = Job(chapter, "p1", {"hardware": "p1"}, tmp_path / "runs" / "03_unlucky.ipynb")
    with pytest.raises(ChapterError) as failed:
        run_jobs([job], n_jobs=1, progress=False)
    message = str(failed.value)
    assert message.startswith("chapter 03_unlucky, profile p1: KernelBroken: the kernel did not")
    assert "a broken install" in message and "\n" not in message
    assert not job.out.exists()
    assert list(private_tmp.iterdir()) == []


def test_a_cells_output_is_one_stream_per_name_however_the_kernel_flushed_it(tmp_path):
    code = (
        "import sys\n"
        "sys.stdout.write('False'); sys.stdout.flush()\n"
        "sys.stderr.write('warned\\n'); sys.stderr.flush()\n"
        "sys.stdout.write(' True\\n'); sys.stdout.flush()\n"
        "print('last')"
    )
    nb = new_notebook(cells=[new_code_cell(code)])
    kernel = Kernel(tmp_path)
    try:
        assert kernel.run(nb) is None
    finally:
        kernel.close()
    streams = [(o["name"], o["text"]) for o in nb.cells[0].outputs]
    assert streams == [("stdout", "False True\nlast\n"), ("stderr", "warned\n")]

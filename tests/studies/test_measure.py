"""`kvoffload measure`: a profile that validates, positive figures, skips instead of crashes."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.hardware import PART_MODELS, build_system, load_system
from kvoffload.inputs.signals import Interrupted
from kvoffload.inputs.units import Dim, parse_quantity
from kvoffload.studies import measure
from kvoffload.studies.measure import machine, profile_file, storage_rates
from tests.support.samples import TINY

KiB, MiB = 1 << 10, 1 << 20


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return measure.run_plan(TINY, directory=tmp_path_factory.mktemp("scratch"))


def test_measured_figures_are_positive_and_finite(report):
    for key, fig in report.figures.items():
        if key == "host.cores":
            assert fig["value"] >= 1
            continue
        assert (
            fig["kind"] == "measured"
            and "kvoffload" in fig["source"]
            and "measure" in fig["source"]
        )
        for dim in Dim:
            try:
                value = parse_quantity(fig["value"], dim)
            except ValueError:
                continue
            assert value > 0 and math.isfinite(value), key
            break


def test_the_profile_validates_and_keeps_its_tables(report, tmp_path):
    raw = yaml.safe_load(
        yaml.safe_dump(measure.profile(report, base="rtx-4090-desktop", ident="me", name="me"))
    )
    path = tmp_path / "me.yaml"
    path.write_text(yaml.safe_dump(raw))
    system = load_system(path)
    assert system.host.memory_bandwidth.kind.value == "measured"
    assert system.gpu.name == load_system("rtx-4090-desktop").gpu.name  # from the base
    rows = measure.random_read_rows(system)
    assert {r["queue_depth"] for r in rows} == {1, 4}
    assert all(r["gb_s"] > 0 for r in rows)


def test_without_pytorch_the_gpu_is_skipped_with_a_reason(report):
    try:
        import torch  # noqa: F401
    except ImportError:
        assert any("GPU" in s and "PyTorch" in s for s in report.skipped)
        assert not any(k.startswith(("gpu.", "link.")) for k in report.figures)


def test_every_random_read_point_reads_even_when_its_time_is_gone(tmp_path):
    """A reader that starts late still reads once: a loaded machine slows a point, never empties it."""
    path = tmp_path / "scratch"
    path.write_bytes(os.urandom(MiB))
    fd = os.open(path, os.O_RDONLY)
    try:
        for depth in (1, 8):
            assert storage_rates._random_reads(fd, MiB, 4 * KiB, depth, 0.0, direct=False) > 0
    finally:
        os.close(fd)


def test_no_direct_io_degrades_to_a_stated_caveat(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "O_DIRECT", raising=False)
    r = measure.run_plan(TINY, directory=tmp_path)
    assert "storage.read_bandwidth" in r.figures
    assert any("direct I/O" in n for n in r.notes)


def test_an_unwritable_folder_is_a_skip_not_a_crash(tmp_path):
    r = measure.run_plan(TINY, directory=tmp_path / "missing")
    assert any(s.startswith("storage:") for s in r.skipped)
    assert "host.memory_bandwidth" in r.figures


def test_scratch_files_are_removed(tmp_path):
    measure.run_plan(TINY, directory=tmp_path)
    assert not list(tmp_path.glob(".kvoffload-measure-*"))


def test_the_written_profile_would_not_be_half_written(report, tmp_path):
    raw = measure.profile(report, base="t4-pcie3", ident="me", name="me")
    assert yaml.safe_load(yaml.safe_dump(raw)) == raw  # plain values, as the file holds them
    build_system(raw, ident="me", origin="test")


def test_every_measured_figure_names_a_field_of_its_part_schema(report):
    for key in report.figures:
        part, name = key.split(".")
        assert name in PART_MODELS[part].__struct_fields__, key


def test_a_part_measured_whole_replaces_the_base_and_the_rest_come_from_it(report):
    raw = measure.profile(report, base="t4-pcie3", ident="me", name="me")
    base = catalog.systems()["t4-pcie3"]
    assert "base" not in raw["host"] and raw["host"]["memory"]["kind"] == "measured"
    assert "base" not in raw["storage"] and raw["storage"]["name"]
    if not any(k.startswith(("gpu.", "link.")) for k in report.figures):  # no PyTorch here
        assert raw["gpu"] == base["gpu"] and raw["link"] == base["link"]


def test_measured_gpu_figures_go_over_the_base_part(report):
    fig = {"value": "200 GB/s", "kind": "measured", "source": "a test"}
    with_gpu = dataclasses.replace(
        report, figures={**report.figures, "gpu.memory_bandwidth_achievable": fig}
    )
    raw = measure.profile(with_gpu, base="t4-pcie3", ident="me", name="me")
    system = build_system(raw, ident="me", origin="test")
    assert system.gpu.memory_bandwidth_achievable.value == 200e9
    assert system.gpu.name == load_system("t4-pcie3").gpu.name


def test_a_profile_the_schema_refuses_is_never_returned(report):
    fig = {"value": "900 GB/s", "kind": "measured", "source": "a test"}  # above the T4's 320 GB/s
    broken = dataclasses.replace(
        report, figures={**report.figures, "gpu.memory_bandwidth_achievable": fig}
    )
    with pytest.raises(InputError, match="measured profile 'me': gpu: memory_bandwidth_achievable"):
        measure.profile(broken, base="t4-pcie3", ident="me", name="me")


@pytest.mark.slow
def test_cli_quick_then_run_chapter_03(cli_process, tmp_path):
    from tests.support.paths import copy_book_sources

    out = tmp_path / "me.yaml"
    r = cli_process("measure", "--quick", "--quiet", "--out", out, "--dir", tmp_path, timeout=120)
    assert r.code == 0, r.err
    assert "profile:" in r.out and out.is_file()
    root = copy_book_sources(tmp_path / "book")
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvoffload",
            "run",
            "--hardware",
            str(out),
            "--chapter",
            "03",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "html" / "03_decode_timing.html").is_file()
    assert Path(out).read_text().count("kind: measured") >= 5


# -- writing the profile ----------------------------------------------------------------------------
def _unwritable_outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Outs a profile cannot be written to, whoever runs the tests (root included)."""
    regular = tmp_path / "a-file"
    regular.write_text("x")
    return {
        "missing folder": (tmp_path / "missing" / "me.yaml", "does not exist"),
        "under a file": (regular / "me.yaml", "is not a directory"),
        "a directory": (tmp_path, "is a directory"),
        "not a regular file": (Path("/dev/null"), "not a regular file"),
        "name too long": (tmp_path / ("x" * 300), "longer than 255 bytes"),
    }


@pytest.mark.parametrize(
    "case", ["missing folder", "under a file", "a directory", "not a regular file", "name too long"]
)
def test_an_out_that_cannot_be_written_is_refused_naming_it(case, tmp_path):
    out, fragment = _unwritable_outs(tmp_path)[case]
    with pytest.raises(InputError, match=fragment) as err:
        measure.check_out(out)
    assert err.value.file == str(out) and err.value.field == "--out"


def test_a_folder_without_write_permission_is_refused():
    """Root writes through permission bits, so as root the check runs as user nobody."""
    parent = Path(tempfile.mkdtemp(prefix="kvoffload-locked-"))  # 0700 under root's tmp_path
    try:
        parent.chmod(0o755)
        locked = parent / "locked"
        locked.mkdir(mode=0o555)
        if os.geteuid() != 0:
            with pytest.raises(InputError, match="cannot write in"):
                measure.check_out(locked / "me.yaml")
            return
        read, write = os.pipe()
        pid = os.fork()  # the child drops to nobody and runs the check: nothing to exec
        if pid == 0:
            status = 1
            try:
                os.close(read)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                try:
                    measure.check_out(locked / "me.yaml")
                    message = "accepted"
                except InputError as exc:
                    message = exc.problem
                os.write(write, message.encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            message = pipe.read().decode()
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert message.startswith(f"cannot write in {locked}: Permission denied"), message
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(parent)


def test_the_profile_is_written_0644_through_a_temporary_file(report, tmp_path, monkeypatch):
    raw = measure.profile(report, base="t4-pcie3", ident="me", name="me")
    out = tmp_path / "me.yaml"
    out.write_text("old")
    out.chmod(0o600)
    renamed = []
    real_replace = os.replace

    def replace(src, dst):
        renamed.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    previous = os.umask(0o022)
    try:
        measure.write_profile(raw, out)
    finally:
        os.umask(previous)
    ((src, dst),) = renamed
    assert src.parent == tmp_path and src != out and dst == out  # same folder: an atomic rename
    assert out.stat().st_mode & 0o777 == 0o644
    assert yaml.safe_load(out.read_text()) == raw
    assert sorted(p.name for p in tmp_path.iterdir()) == ["me.yaml"]


def test_the_umask_can_only_narrow_the_mode(report, tmp_path):
    raw = measure.profile(report, base="t4-pcie3", ident="me", name="me")
    previous = os.umask(0o077)
    try:
        measure.write_profile(raw, tmp_path / "me.yaml")
    finally:
        os.umask(previous)
    assert (tmp_path / "me.yaml").stat().st_mode & 0o777 == 0o600


def test_a_full_disk_leaves_no_temporary_file_and_the_old_profile_whole(
    report, tmp_path, monkeypatch
):
    import errno

    raw = measure.profile(report, base="t4-pcie3", ident="me", name="me")
    out = tmp_path / "me.yaml"
    out.write_text("the old profile\n")

    def full(fd, data):
        os.write(fd, bytes(data)[:100])  # part of it, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(profile_file, "_write_all", full)
    with pytest.raises(InputError, match="could not write the profile: No space left") as err:
        measure.write_profile(raw, out)
    assert err.value.file == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["me.yaml"]
    assert out.read_text() == "the old profile\n"


def test_the_scratch_file_is_removed_when_the_measurement_is_interrupted(tmp_path, monkeypatch):
    def interrupted(*_args, **_kwargs):
        assert list(tmp_path.glob(".kvoffload-measure-*"))  # it exists while reads run
        raise Interrupted(15)

    monkeypatch.setattr(storage_rates, "_random_reads", interrupted)
    with pytest.raises(Interrupted):
        measure.storage(TINY, measure.Report(), lambda _: None, tmp_path)
    assert not list(tmp_path.glob(".kvoffload-measure-*"))


def test_a_stop_is_not_swallowed_as_a_failed_part(tmp_path, monkeypatch):
    """The GPU part turns any Exception into a skip; a stop signal must still stop everything."""

    def stopped(*_args):
        raise Interrupted(2)

    monkeypatch.setattr(machine, "gpu", stopped)
    with pytest.raises(Interrupted):
        measure.run_plan(TINY, directory=tmp_path)


def test_skip_reasons_from_hostile_errors_are_one_plain_line_the_profile_accepts(
    tmp_path, monkeypatch
):
    """A driver's multi-line message and a folder named with a newline still give a profile."""
    from kvoffload.inputs.text import NOTE_CHARS, text_problem

    def broken(*_args):
        raise RuntimeError("CUDA error: launch failed\n  at line 2\r\x1b[31mred\u2028" + "x" * 3000)

    monkeypatch.setattr(machine, "gpu", broken)
    r = measure.run_plan(TINY, directory=tmp_path / "no\nsuch\x1bfolder")
    assert len(r.skipped) == 2
    for reason in r.skipped:
        assert text_problem(reason, max_chars=NOTE_CHARS) is None, reason
    gpu, storage = sorted(r.skipped)
    assert gpu.startswith(
        "GPU: measurement failed: RuntimeError: CUDA error: launch failed at line 2"
    )
    assert r"\x1b[31mred" in gpu and len(gpu) == NOTE_CHARS
    assert r"no such\x1bfolder: No such file or directory" in storage  # the newline collapsed
    raw = measure.profile(r, base="t4-pcie3", ident="me", name="me")
    path = tmp_path / "me.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_system(path).id == "me"

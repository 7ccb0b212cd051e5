"""The command line: outputs users rely on, and bad input refused in one line with exit 2."""

from __future__ import annotations

import json
import time

import pytest

from kvoffload.inputs.files import MAX_FILE_BYTES
from tests.support.paths import REPO
from tests.support.refusals import assert_refused
from tests.support.samples import BAD_PROFILES, GOOD_PROFILE

# a profile as a user writes one: catalog parts by name, a measured figure, bare values


def test_kv_acceptance(cli):
    r = cli("kv", "llama-3.1-8b", "--seq", "128000", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["total_bytes"] == 16_777_216_000
    assert isinstance(out["total_bytes"], int)
    assert out["bytes_per_token"] == 131_072


def test_kv_human_output_states_gb_and_gib(cli):
    r = cli("kv", "llama-3.1-8b", "--seq", "128000", "--batch", "4")
    assert r.code == 0
    assert "67.11 GB (62.5 GiB)" in r.out


def test_kv_sliding_window_is_reported(cli):
    r = cli("kv", "mistral-7b-v0.1", "--seq", "32768", "--json")
    out = r.json()
    assert out["window_capped_layers"] == 32
    assert out["total_bytes"] == 4096 * 131_072


def test_models_list_and_show(cli):
    r = cli("models", "list")
    assert r.code == 0 and "deepseek-v3" in r.out and "mla" in r.out
    r = cli("models", "show", "deepseek-v3", "--json")
    info = r.json()
    assert info["attention"] == "mla" and info["kv_bytes_per_token_bf16"] == 61 * 576 * 2
    assert info["moe"]["experts"] == 256


def test_hardware_list_names_every_system(cli):
    r = cli("hardware", "list")
    assert r.code == 0
    for ident in ("article-reference", "a100-80gb-sxm-pcie4", "gh200-nvlink-c2c", "t4-pcie3"):
        assert ident in r.out


def test_article_reference_shows_pcie_32_gbps_with_kind_and_source(cli):
    r = cli("hardware", "show", "article-reference", "--json")
    assert r.code == 0, r.err
    link = r.json()["link"]
    assert link["h2d_bandwidth"]["value"] == 32e9
    assert link["h2d_bandwidth"]["kind"] == "assumed"
    assert link["h2d_bandwidth"]["source"] == "kvoffload-article"
    assert link["h2d_bandwidth"]["source_title"]


def test_a100_shows_raw_and_measured_achievable(cli):
    link = cli("hardware", "show", "a100-80gb-sxm-pcie4", "--json").json()["link"]
    assert link["raw_bandwidth"]["value"] == 31.5e9
    assert link["raw_bandwidth"]["kind"] == "spec"
    achievable = link["h2d_bandwidth"]
    assert achievable["kind"] == "measured"
    assert 20e9 < achievable["value"] < 31.5e9
    assert achievable["source_url"].startswith("https://")


def test_hardware_show_human(cli):
    r = cli("hardware", "show", "a100-80gb-sxm-pcie4")
    assert r.code == 0
    assert "31.5 GB/s" in r.out and "measured" in r.out and "spec" in r.out


def test_validate_a_good_profile_with_overrides(cli, write):
    path = write("mine.yaml", GOOD_PROFILE)
    r = cli("hardware", "validate", path)
    assert r.code == 0, r.err
    shown = cli("hardware", "show", path, "--json").json()
    assert shown["id"] == "my-box"
    assert shown["link"]["h2d_bandwidth"]["value"] == 22e9
    assert shown["link"]["raw_bandwidth"]["value"] == 31.5e9  # from the base part
    assert shown["host"]["memory"]["kind"] == "assumed"  # a bare value


def test_profile_based_on_a_catalog_system(cli, write):
    path = write("base.yaml", "base: a100-80gb-sxm-pcie4\nlink: {h2d_bandwidth: 12 GB/s}\n")
    shown = cli("hardware", "show", path, "--json").json()
    assert shown["link"]["h2d_bandwidth"]["value"] == 12e9
    assert shown["gpu"]["memory_bandwidth"]["value"] > 1e12


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_is_refused_in_one_line(case, cli_process, write):
    text, fragment = BAD_PROFILES[case]
    path = write(f"{case}.yaml", text)
    started = time.monotonic()
    r = cli_process("hardware", "validate", path)
    elapsed = time.monotonic() - started
    assert_refused(r, path, fragment)
    assert elapsed < 10  # a hang guard; the benchmark prints the real figure


def test_non_utf8_profile(cli_process, write):
    path = write("latin1.yaml", "name: caf\xe9\n".encode("latin-1"))
    assert_refused(cli_process("hardware", "validate", path), path, "not UTF-8")


def test_oversized_profile(cli_process, write):
    path = write("huge.yaml", "# " + "x" * (MAX_FILE_BYTES + 1))
    assert_refused(cli_process("hardware", "validate", path), path, "larger than")


def test_missing_profile_file(cli_process, tmp_path):
    path = tmp_path / "nope.yaml"
    assert_refused(cli_process("hardware", "show", path), path, "no such file")


BAD_CONFIGS = {
    "malformed-json": ('{"hidden_size": 4096,', "malformed JSON"),
    "nan": ('{"hidden_size": NaN}', "NaN is not a number"),
    "missing-hidden": (
        json.dumps({"num_hidden_layers": 2}),
        "hidden_size: required field is missing",
    ),
    "bad-heads": (
        json.dumps(
            {
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "num_key_value_heads": 3,
                "vocab_size": 10,
                "intermediate_size": 64,
            }
        ),
        "num_key_value_heads: 8 attention heads is not a multiple of 3 KV heads",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_json_is_refused_in_one_line(case, cli_process, tmp_path):
    text, fragment = BAD_CONFIGS[case]
    path = tmp_path / case / "config.json"
    path.parent.mkdir()
    path.write_text(text)
    assert_refused(cli_process("kv", path, "--seq", "1000"), path, fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("kv", "llama-3.1-8b", "--seq", "128K"), "'128K' is not a whole number"),
        (("kv", "llama-3.1-8b", "--seq", "0"), "must be at least 1"),
        (("kv", "llama-3.1-8b", "--seq", "1000", "--dtype", "int3"), "unknown KV precision 'int3'"),
        (("kv", "llama-3.1-8x", "--seq", "1000"), "unknown model id 'llama-3.1-8x'"),
        (("hardware", "show", "h100"), "unknown system id 'h100'; did you mean"),
        (("hardware", "frobnicate"), "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_in_one_line(args, fragment, cli_process):
    r = cli_process(*args)
    assert r.code == 2
    assert len(r.err.strip().splitlines()) == 1, r.err
    assert fragment in r.err and "Traceback" not in r.err


# -- the book's commands --------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("book",), ("run", "--hardware", "t4-pcie3")])
def test_the_book_without_its_extras_is_refused_in_one_line(args, cli, monkeypatch):
    from kvoffload.bookbuild import extras

    real = extras.find_spec
    monkeypatch.setattr(extras, "find_spec", lambda n: None if n == "nbformat" else real(n))
    r = cli(*args)
    assert r.code == 2 and r.out == ""
    assert r.err == (
        "kvoffload: error: the book needs the optional dependencies: "
        "pip install 'kvoffload[book]' (missing: nbformat)\n"
    )


@pytest.mark.parametrize("error", ["ChapterError", "BuildError"])
@pytest.mark.parametrize(
    ("args", "module", "function"),
    [
        (("book", "--quiet"), "site", "build_book"),
        (("run", "--hardware", "t4-pcie3", "--quiet"), "profile_run", "run_for_profile"),
    ],
)
def test_a_failed_build_exits_1_in_one_line(error, args, module, function, cli, monkeypatch):
    import importlib

    from kvoffload.bookbuild import errors, runner

    message = "chapter 03_decode_timing, profile t4-pcie3: cell 4 raised ValueError: boom"

    def fail(*_, **__):
        raise getattr(errors, error)(message)

    monkeypatch.setattr(runner, "find_root", lambda: REPO)
    monkeypatch.setattr(importlib.import_module(f"kvoffload.bookbuild.{module}"), function, fail)
    r = cli(*args)
    assert r.code == 1
    assert r.err == f"kvoffload: build failed: {message}\n"


def test_models_show_names_recurrent_and_mlp_only_layers_by_kind(capsys):
    from kvoffload.cli import main

    assert main(["models", "show", "nemotron-h-56b"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "10 layers full, 54 layers Mamba (state), 54 layers MLP only" in line
    assert "window 0" not in line


def test_a_context_beyond_the_model_is_refused_in_one_line(capsys):
    from kvoffload.cli import main

    assert main(["kv", "llama-3-8b", "--seq", "128000", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "beyond llama-3-8b's context of 8,192" in err[0]
    assert main(["kv", "llama-3.1-8b", "--seq", "128000", "--json"]) == 0  # 131,072 positions


def test_validate_prints_calibration_and_checks_apart_each_row_with_its_source_version(cli):
    import json

    from kvoffload.studies import validation

    r = cli("validate")
    assert r.code == 0, r.err
    out = r.out.splitlines()
    cal = out.index(next(line for line in out if line.startswith("== calibration rows")))
    chk = out.index(next(line for line in out if line.startswith("== check rows")))
    assert cal < chk
    for row in validation.rows():
        i = next(i for i, line in enumerate(out) if line.split()[:1] == [row["id"]])
        assert (cal < i < chk) == (validation.role(row) == "calibration"), row["id"]
        source = next(line for line in out[i + 1 : i + 3] if line.lstrip().startswith("source: "))
        assert validation.cite(row) in source
    assert any(line.startswith("check rows: ") for line in out)
    data = json.loads(cli("validate", "--json").out)
    # a row the model says does not fit is printed as refused, never predicted
    for row in data["rows"]:
        if row.get("refused"):
            i = next(i for i, line in enumerate(out) if line.split()[:1] == [row["id"]])
            assert any(s.strip().startswith("refused: does not fit") for s in out[i : i + 4])
    assert {r["role"] for r in data["rows"]} == {"calibration", "check"}
    assert all(r["source_version"] for r in data["rows"])
    refused = [r for r in data["rows"] if r["refused"]]
    # none is refused today (t4-18 fits since the T4 host's memory is read as 208 GiB); any that is
    # carries no prediction
    assert all(r["predicted"] is None and r["ratio"] is None for r in refused)
    assert data["tables"]["zero-inference-a6000"]["moved"]["from"] == "check"


# -- measure and run: where they write ----------------------------------------------------------
def _no_measuring(monkeypatch):
    from kvoffload.studies import measure

    def never(*_, **__):
        raise AssertionError("measured before checking --out")

    monkeypatch.setattr(measure, "run", never)
    monkeypatch.setattr(measure, "run_plan", never)


@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ("missing/me.yaml", "does not exist"),
        ("a-file/me.yaml", "is not a directory"),
        (".", "is a directory"),
    ],
)
def test_measure_refuses_an_unwritable_out_before_measuring(
    where, fragment, cli, monkeypatch, tmp_path
):
    _no_measuring(monkeypatch)
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / where
    r = cli("measure", "--quick", "--quiet", "--out", out, "--dir", tmp_path)
    assert r.code == 2 and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and f"{out}: --out: " in lines[0] and fragment in lines[0], r.err
    assert not list(tmp_path.glob(".kvoffload-*"))


def test_measure_writes_what_it_measured_and_exits_0(cli, monkeypatch, tmp_path):
    from kvoffload.studies import measure
    from tests.support.samples import TINY

    monkeypatch.setattr(measure.Plan, "quick", staticmethod(lambda: TINY))
    out = tmp_path / "me.yaml"
    r = cli("measure", "--quick", "--quiet", "--out", out, "--dir", tmp_path)
    assert r.code == 0, r.err
    assert f"profile: {out}" in r.out and out.stat().st_mode & 0o022 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["me.yaml"]  # no scratch, no temp


@pytest.mark.parametrize(
    ("where", "fragment"), [("a-file", "exists and is not a folder"), ("a-file/run", "is a file")]
)
def test_run_refuses_an_out_it_cannot_create_in_one_line(where, fragment, cli, tmp_path):
    pytest.importorskip("nbformat")
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / where
    r = cli("run", "--hardware", "t4-pcie3", "--chapter", "01", "--out", out, "--quiet")
    assert r.code == 2 and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and f"{out}: --out: " in lines[0] and fragment in lines[0], r.err


def test_run_failing_to_write_its_folder_exits_2_in_one_line(cli, monkeypatch, tmp_path):
    import errno

    pytest.importorskip("nbformat")
    from kvoffload.bookbuild import profile_run, runner

    page = tmp_path / "run" / "html" / "01_memory_tiers.html"

    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device", str(page))

    monkeypatch.setattr(runner, "find_root", lambda: REPO)
    monkeypatch.setattr(profile_run, "run_for_profile", full)
    r = cli("run", "--hardware", "t4-pcie3", "--out", tmp_path / "run", "--quiet")
    assert r.code == 2 and r.out == ""
    assert r.err == f"kvoffload: error: {page}: No space left on device\n"


# -- argument bounds and interrupts -----------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--seq", "33554433"), "--seq: 33,554,433 is more than 33,554,432 tokens"),
        (("--seq", "1" + "0" * 40), "--seq: a 41-digit number is more than 33,554,432 tokens"),
        (("--seq", "1000", "--batch", "8193"), "--batch: 8,193 is more than 8,192 requests"),
        (("--seq", "1000", "--batch", "x"), "'x' is not a whole number of requests"),
        (("--seq", "1000", "a\nb\x1b[2J"), r"unrecognized arguments: a\nb\x1b[2J"),
    ],
)
def test_seq_and_batch_past_the_limits_are_refused_in_one_line(args, fragment, cli):
    r = cli("kv", "llama-3.1-8b", *args)
    assert r.code == 2 and r.out == ""
    assert r.err.endswith("\n") and r.err[:-1].isprintable(), r.err  # one line, no escapes
    assert fragment in r.err, r.err


def test_the_largest_batch_is_accepted(cli):
    r = cli("kv", "llama-3.1-8b", "--seq", "1000", "--batch", "8192", "--json")
    assert r.code == 0, r.err
    assert r.json()["batch"] == 8192


@pytest.mark.parametrize(
    ("message", "name", "code"),
    [("", "SIGINT", 130), ("SIGTERM", "SIGTERM", 143), ("SIGHUP", "SIGHUP", 129)],
)
@pytest.mark.parametrize(
    ("args", "module", "function"),
    [
        (("book", "--quiet"), "site", "build_book"),
        (("run", "--hardware", "t4-pcie3", "--quiet"), "profile_run", "run_for_profile"),
    ],
)
def test_an_interrupted_build_says_so_in_one_line(
    message, name, code, args, module, function, cli, monkeypatch
):
    import importlib

    pytest.importorskip("nbformat")
    from kvoffload.bookbuild import runner

    def stop(*_, **__):
        raise KeyboardInterrupt(message) if message else KeyboardInterrupt

    monkeypatch.setattr(runner, "find_root", lambda: REPO)
    monkeypatch.setattr(importlib.import_module(f"kvoffload.bookbuild.{module}"), function, stop)
    r = cli(*args)
    assert r.code == code and r.out == ""
    assert r.err == (
        f"kvoffload: interrupted ({name}); finished chapters stay cached and the last site is kept\n"
    )


def test_another_interrupted_command_says_so_in_one_line(cli, monkeypatch):
    from kvoffload.inputs import hardware

    def stop(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(hardware, "load_system", stop)
    r = cli("hardware", "show", "t4-pcie3")
    assert (r.code, r.out, r.err) == (130, "", "kvoffload: interrupted (SIGINT)\n")


def test_ctrl_c_in_a_real_process_exits_130_with_one_line():
    import os
    import signal
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from kvoffload import cli\n"
        "from kvoffload.inputs import hardware\n"
        "def slow(*_):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "hardware.load_system = slow\n"
        "sys.exit(cli.main(['hardware', 'show', 't4-pcie3']))\n"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and out == ""
    assert err == "kvoffload: interrupted (SIGINT)\n"

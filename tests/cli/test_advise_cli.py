"""kvoffload advise on the command line: the table, --json, and bad input refused in one line."""

from __future__ import annotations

import pytest


def test_advise_prints_the_table_and_the_command(cli):
    r = cli("advise", "--hardware", "rtx-4090-desktop", "--model", "gpt-oss-120b")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].split()[:3] == ["#", "engine", "weights"]
    assert lines[2].split()[:5] == [
        "1",
        "llamacpp",
        "mxfp4_moe",
        lines[2].split()[3],
        "--n-cpu-moe",
    ]
    assert lines[3].strip().startswith("llama-server -m gpt-oss-120b-MXFP4_MOE.gguf -ngl 99")


def test_advise_json_and_all(cli):
    r = cli("advise", "--hardware", "rtx-4090-desktop", "--model", "all", "--json",
            "--engines", "llamacpp", "--context", "4096")  # fmt: skip
    assert r.code == 0, r.err
    models = r.json()["models"]
    assert all(m["best"] is None or m["best"]["engine"] == "llamacpp" for m in models)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "nope-1b"], "nope-1b"),
        (["--model", "gpt-oss-120b", "--context", "0"], "at least 1"),
        (["--model", "gpt-oss-120b", "--context", "10**9"], "whole number"),
        (["--model", "gpt-oss-120b", "--context", "999999999"], "tokens"),
        (["--model", "gemma-2-9b", "--context", "100000"], "--context 100,000"),
        (["--model", "gpt-oss-120b", "--batch", "99999"], "requests"),
        (["--model", "gpt-oss-120b", "--budget-ms", "-1"], "above 0"),
        (["--model", "gpt-oss-120b", "--budget-ms", "nan"], "above 0"),
        (["--model", "gpt-oss-120b", "--engines", "flexgen"], "advise searches"),
        (["--model", "gpt-oss-120b", "--engines", ","], "advise searches"),
        (["--model", "gpt-oss-120b", "--engines", "x" * 5000], "advise searches"),
    ],
)
def test_bad_input_exits_2_in_one_line(cli, args, fragment):
    r = cli("advise", "--hardware", "rtx-4090-desktop", *args)
    assert r.code == 2 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and fragment in r.err, r.err


def test_an_unknown_profile_is_refused(cli):
    r = cli("advise", "--hardware", "no-such-box", "--model", "gpt-oss-120b")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "--hardware" in r.err


def test_a_machine_where_detect_read_no_gpu_is_told_so_under_the_header(cli, tmp_path):
    """`hardware detect` on a box without an NVIDIA GPU puts a stand-in GPU in the profile; the
    advice says so before its table, and in --json's notes."""
    from kvoffload.inputs import detect, probe

    memory = probe.MemoryReading(64 * 2**30, None, None, None, "/proc/meminfo", None)
    cpuinfo = "processor\t: 0\nmodel name\t: AMD Ryzen 9 5950X\nphysical id\t: 0\ncore id\t: 0\n"
    raw = detect.detected_profile(probe.Reading((), probe.parse_cpuinfo(cpuinfo), memory), "box")
    import json

    profile = tmp_path / "box.json"
    profile.write_text(json.dumps(raw))
    r = cli("advise", "--hardware", str(profile), "--model", "qwen3-30b-a3b")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].startswith("  note: no GPU was detected on this machine")
    assert "NVIDIA GeForce RTX 4090" in lines[1] and lines[2].split()[:2] == ["#", "engine"]
    j = cli("advise", "--hardware", str(profile), "--model", "all", "--json").json()
    assert j["notes"][0].startswith("no GPU was detected")
    # a profile with its GPU has no such note
    mine = cli("advise", "--hardware", "rtx-4090-desktop", "--model", "qwen3-30b-a3b").out
    assert "no GPU was detected" not in mine

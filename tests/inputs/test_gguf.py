"""GGUF files: the ggml type table, exact bytes per tensor group, and a hostile corpus."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter
from gguf import constants as gguf_constants

from kvoffload.inputs import gguf as spec_gguf
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.ggml_types import ggml_types
from kvoffload.inputs.gguf import read_header
from kvoffload.inputs.models import load_model
from kvoffload.inputs.precision import WeightFormat as W
from tests.support.gguf_files import write_model

T = GGMLQuantizationType


def test_every_ggml_type_matches_gguf_py():
    ours = {t.name: (t.id, t.block, t.bytes) for t in ggml_types().values()}
    theirs = {t.name.lower(): (t.value, *GGML_QUANT_SIZES[t]) for t in T}
    assert ours == theirs


def test_the_format_constants_match_gguf_py():
    assert spec_gguf.GGUF_MAGIC == gguf_constants.GGUF_MAGIC == int.from_bytes(b"GGUF", "little")
    assert spec_gguf.GGUF_DEFAULT_ALIGNMENT == gguf_constants.GGUF_DEFAULT_ALIGNMENT == 32
    mine = {t.name: t.value for t in spec_gguf.GgufValueType}
    assert mine == {t.name: t.value for t in gguf_constants.GGUFValueType}
    assert sorted(mine.values()) == list(range(13))


def test_models_show_gives_each_group_exactly(tmp_path, cli_process):
    path = tmp_path / "tiny.gguf"
    expect = write_model(path)
    r = cli_process("models", "show", path, "--json", timeout=30)
    assert r.code == 0, r.err
    info = r.json()["gguf"]
    assert info["groups"] == expect
    assert info["total"] == sum(expect.values()) == r.json()["weight_bytes"]["gguf"]
    assert set(info["types"]) == {"iq4_xs", "q6_k", "mxfp4", "f16", "f32"}
    assert r.json()["kv_heads"] == 2 and r.json()["layers"] == 2


def test_a_catalog_model_has_no_gguf_weights():
    with pytest.raises(InputError, match="gguf"):
        load_model("llama-3.1-8b").weight_bytes(W.GGUF)


def test_gpt_oss_experts_stay_mxfp4_in_the_mixes():
    m = load_model("gpt-oss-120b")
    for fmt in (W.Q4_K_S, W.Q2_K, W.IQ4_XS, W.MXFP4_MOE):
        experts = int(m.weight_bytes(fmt).experts.sum())
        assert experts == sum(b for t, b in m.tensor_bytes(W.MXFP4) if t.role.startswith("exp_"))
    # published: unsloth's and ggml-org's gpt-oss-120b GGUFs are 59-63 GiB / 63-65 GB in total
    assert 60e9 < m.weight_bytes(W.Q4_K_S).total < 64e9
    assert m.weight_bytes(W.Q4_K_M).total > 87e9  # the existing mix, unchanged


def _hostile(tmp_path):
    good = tmp_path / "good.gguf"
    write_model(good)
    data = good.read_bytes()
    cases = {}
    for cut in (
        0,
        3,
        4,
        8,
        16,
        24,
        30,
        60,
        200,
        900,
        2000,
        len(data) // 2,
        len(data) - 1,
    ):
        cases[f"cut{cut}"] = data[:cut]
    head = data[:8]
    cases["tensors2^63"] = head + struct.pack("<QQ", 1 << 63, 0)
    cases["kv2^63"] = head + struct.pack("<QQ", 0, 1 << 63)
    key = b"general.architecture"
    bad_array = head + struct.pack("<QQ", 0, 1) + struct.pack("<Q", len(key)) + key
    cases["array2^63"] = bad_array + struct.pack("<IIQ", 9, 8, 1 << 63)
    cases["numarray2^63"] = bad_array + struct.pack("<IIQ", 9, 4, 1 << 62)
    cases["string2^63"] = bad_array + struct.pack("<IQ", 8, 1 << 63)
    cases["unknowntype"] = bad_array + struct.pack("<I", 77)
    cases["version9"] = data[:4] + struct.pack("<I", 9) + data[8:]
    cases["ctrl\x1b[31mname"] = data
    name = b"x\x07y"
    one = (
        struct.pack("<Q", len(name)) + name + struct.pack("<IQI", 1, 256, 0) + struct.pack("<Q", 0)
    )
    cases["ctrlkey"] = head + struct.pack("<QQ", 1, 0) + one
    cases["dims"] = head + struct.pack("<QQ", 1, 0) + struct.pack("<Q", 1) + b"a"
    cases["dims"] += struct.pack("<I", 4) + struct.pack("<QQQQ", 1 << 40, 1 << 40, 1 << 40, 1)
    tensor = struct.pack("<Q", 1) + b"a" + struct.pack("<IQ", 1, 256)
    cases["type99"] = head + struct.pack("<QQ", 1, 0) + tensor + struct.pack("<IQ", 99, 0)
    cases["offset"] = head + struct.pack("<QQ", 1, 0) + tensor + struct.pack("<IQ", 0, 1 << 40)
    cases["<b>markup<\\b>&amp;"] = data[: len(data) // 3]
    return cases


def test_hostile_files_exit_0_or_2_with_one_line(tmp_path, cli_process):
    for label, content in _hostile(tmp_path).items():
        path = tmp_path / f"{label}.gguf"
        path.write_bytes(content)
        r = cli_process("models", "show", path, "--json", timeout=5)
        assert r.code in (0, 2), (label, r.code, r.err)
        if r.code == 2:
            assert len(r.err.strip().splitlines()) == 1, (label, r.err)
            assert "\x1b" not in r.err and "\x07" not in r.err, label


def test_a_fifo_and_a_folder_are_refused(tmp_path, cli_process):
    os.mkfifo(tmp_path / "pipe.gguf")
    (tmp_path / "dir.gguf").mkdir()
    for name in ("pipe.gguf", "dir.gguf"):
        r = cli_process("models", "show", tmp_path / name, timeout=5)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, (name, r.err)


def _split(tmp_path, parts=3):
    """Write a 3-part set by hand: the model in part 1, extra tensors in the others."""
    whole = tmp_path / "whole.gguf"
    write_model(whole)
    names = [tmp_path / f"m-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    total = len(read_header(whole).tensors) + parts - 1
    for i, path in enumerate(names):
        w = GGUFWriter(str(path), "llama")
        if i == 0:
            w = None
            _write_first(whole, path, parts, total)
            continue
        w.add_uint16("split.no", i)
        w.add_uint16("split.count", parts)
        w.add_int32("split.tensors.count", total)
        w.add_tensor(f"blk.0.extra{i}.weight", np.zeros((4, 256), np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return names


def _write_first(whole, path, parts, total):
    from gguf import GGUFReader

    src = GGUFReader(str(whole))  # a small file the test wrote; only to copy it
    w = GGUFWriter(str(path), "llama")
    for f in src.fields.values():
        if f.name.startswith(("llama.", "tokenizer.")):
            w.add_key_value(
                f.name,
                f.contents(),
                f.types[0],
                f.types[-1] if len(f.types) > 1 else None,
            )
    w.add_uint16("split.no", 0)
    w.add_uint16("split.count", parts)
    w.add_int32("split.tensors.count", total)
    for t in src.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_split_set_is_read_whole_and_a_bad_part_is_refused(tmp_path, cli_process):
    names = _split(tmp_path)
    single = load_model(tmp_path / "whole.gguf").weight_bytes(W.GGUF).total
    whole = load_model(names[1]).weight_bytes(W.GGUF).total
    assert whole == single + 2 * 4 * 256 * 2
    names[2].rename(tmp_path / "gone.gguf")
    r = cli_process("models", "show", names[0], timeout=5)
    assert r.code == 2 and "no such file" in r.err
    (tmp_path / "gone.gguf").write_bytes(names[1].read_bytes())  # part 2 posing as part 3
    (tmp_path / "gone.gguf").rename(names[2])
    r = cli_process("models", "show", names[0], timeout=5)
    assert r.code == 2 and "part" in r.err and len(r.err.strip().splitlines()) == 1

"""Hostile inputs: odd files, huge numbers and YAML tricks end in one line and status 2, fast.

Through the CLI as a real process for the files that used to hang or exhaust memory (a device,
a FIFO without a writer, a symlink to /dev/urandom), in-process for the rest.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kvoffload.inputs import catalog
from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import load_mapping, parse_yaml, read_bytes
from kvoffload.inputs.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_FILE_BYTES,
    MAX_HEAD_DIM,
    MAX_LAYERS,
    MAX_NAME_BYTES,
)
from kvoffload.inputs.models import from_hf_config, load_model

# Generous against a loaded 2-core machine; a hang (a FIFO read) never ends, a read of
# /dev/zero runs out of memory first.
PROCESS_SECONDS = 20
COMMANDS = [("hardware", "validate"), ("models", "show"), ("predict",)]


def one_line_exit_2(run) -> str:
    assert run.code == 2, (run.code, run.err)
    assert "Traceback" not in run.err
    lines = run.err.splitlines()
    assert len(lines) == 1, run.err
    return lines[0]


@pytest.fixture
def odd_files(tmp_path: Path) -> dict[str, Path]:
    """Files that are not regular files, or are too big, each as a path."""
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    urandom = tmp_path / "random.yaml"
    urandom.symlink_to("/dev/urandom")
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(10 * 10**6)  # 10 MB of zeros, sparse
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    return {
        "device": Path("/dev/zero"),
        "fifo": fifo,
        "urandom": urandom,
        "big": big,
        "directory": folder,
    }


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("kind", ["device", "fifo", "urandom", "big", "directory"])
def test_odd_files_exit_2_quickly_through_the_cli(cli_process, odd_files, command, kind):
    start = time.monotonic()
    line = one_line_exit_2(cli_process(*command, odd_files[kind], timeout=PROCESS_SECONDS))
    assert time.monotonic() - start < PROCESS_SECONDS
    expected = {
        "device": "is a device",
        "fifo": "named pipe",
        "urandom": "is a device",
        "big": "larger than the 1048576 byte limit",
        "directory": "is a directory",
    }[kind]
    assert expected in line
    assert odd_files[kind].name in line


@pytest.mark.parametrize("key", ["model", "hardware"])
def test_a_scenario_naming_a_fifo_exits_2(cli_process, tmp_path, key):
    os.mkfifo(tmp_path / "pipe.json")
    fields = {"model": "llama-3.1-8b", "hardware": "t4-pcie3", key: "pipe.json"}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"hardware: {fields['hardware']}\nmodel: {fields['model']}\n"
        "workload: {batch: 1, prompt: 1000, generate: 8}\n"
    )
    line = one_line_exit_2(cli_process("predict", scenario, timeout=PROCESS_SECONDS))
    assert "pipe.json" in line and "named pipe" in line


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda d: d / ("a" * 300 + ".yaml"), f"at most {MAX_NAME_BYTES}"),
        (lambda d: Path("x/" * 3000 + "p.yaml"), "at most 4096"),
        (lambda d: d / ("é" * 200 + ".json"), f"at most {MAX_NAME_BYTES}"),
    ],
)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_overlong_paths_exit_2(cli, tmp_path, make, fragment, command):
    line = one_line_exit_2(cli(*command, make(tmp_path)))
    assert fragment in line
    assert len(line) < 400  # the path is shortened, not printed whole


def test_overlong_id_is_shortened_in_the_error(cli):
    line = one_line_exit_2(cli("models", "show", "m" * 5000))
    assert "unknown model id" in line and len(line) < 2000


def test_control_characters_in_a_path_stay_on_one_line(cli, tmp_path):
    line = one_line_exit_2(cli("models", "show", tmp_path / "a\nb\rc.yaml"))
    assert "a\\nb\\rc.yaml" in line


def test_read_bytes_reads_at_most_the_cap(tmp_path):
    path = tmp_path / "exact.yaml"
    path.write_bytes(b"a" * MAX_FILE_BYTES)
    assert len(read_bytes(path)) == MAX_FILE_BYTES
    path.write_bytes(b"a" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InputError, match="larger than"):
        read_bytes(path)


def test_read_bytes_refuses_a_fifo_without_opening_it(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(InputError, match="named pipe"):
        read_bytes(fifo)
    assert time.monotonic() - start < 1


# -- YAML and JSON tricks ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: " + "9" * 5000, "a number of 5000 characters"),
        ("a: " + ":".join(["59"] * 200000), "a number of"),  # base-60: quadratic in PyYAML
        ("a: !!int '" + "1:" * 100000 + "1'", "a number of"),
        ("a: !!int '" + "9" * 5000 + "'", "a number of"),
        ("a: 2020-13-45", "malformed YAML: month must be in 1..12"),  # a ValueError inside
        ("a: !!float '" + "1" * 5000 + "'", "a number of"),
        ("a: " + "[" * 40 + "]" * 40, "nested deeper"),
    ],
)
def test_yaml_numbers_and_nesting_are_refused_quickly(text, fragment):
    start = time.monotonic()
    with pytest.raises(InputError, match=fragment):
        parse_yaml(text, "x.yaml")
    assert time.monotonic() - start < 5


def test_json_huge_integer_and_nesting(write):
    with pytest.raises(InputError, match="thousands of digits"):
        load_mapping(write("c.json", '{"a": ' + "9" * 5000 + "}"))
    with pytest.raises(InputError, match="nested deeper"):
        load_mapping(write("d.json", '{"a": ' + "[" * 50 + "]" * 50 + "}"))


# -- model configs ---------------------------------------------------------------------------
LLAMA = catalog.load("models/llama-3.1-8b")["config"]


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num_hidden_layers", 100_000, "1,024"),
        ("num_hidden_layers", 10**9, "plausible maximum"),
        ("hidden_size", 10**4000, "4001-digit number"),
        ("head_dim", 10**12, f"{MAX_HEAD_DIM:,}"),
        ("vocab_size", 10**9, "plausible maximum"),
        ("num_key_value_heads", 2**40, "plausible maximum"),
        ("max_position_embeddings", 10**20, f"{MAX_CONTEXT_TOKENS:,}"),
        ("sliding_window", 10**20, "plausible maximum"),
        ("layer_types", [["full_attention"]] * 32, "unsupported layer type"),
        ("model_type", ["llama"], "must be text"),
        ("torch_dtype", "bf16\nevil", "line break"),
        ("num_attention_heads", 2.5, "must be an integer"),
    ],
)
def test_config_numbers_and_shapes_are_bounded(key, value, fragment):
    start = time.monotonic()
    with pytest.raises(InputError, match=fragment) as info:
        from_hf_config({**LLAMA, key: value}, ident="x")
    assert info.value.field is not None and info.value.field.startswith(key.split(".")[0])
    assert time.monotonic() - start < 1


def test_the_largest_accepted_depth_is_quick():
    start = time.monotonic()
    model = from_hf_config({**LLAMA, "num_hidden_layers": MAX_LAYERS}, ident="deep")
    assert model.n_layers == MAX_LAYERS and model.params > 0
    assert time.monotonic() - start < 2


def test_a_cache_too_large_for_int64_is_refused():
    # every number within its bound, but together 2 x 1024 x 4096 x 4 B x 1024 layers a token
    cfg = {
        **LLAMA,
        "num_hidden_layers": MAX_LAYERS,
        "num_attention_heads": 1024,
        "num_key_value_heads": 1024,
        "head_dim": MAX_HEAD_DIM,
    }
    with pytest.raises(InputError, match="one token's KV cache"):
        from_hf_config(cfg, ident="wide")


MOE = catalog.load("models/qwen3-30b-a3b")["config"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mlp_only_layers", 5),
        ("mlp_only_layers", [[1]]),
        ("mlp_only_layers", ["a"]),
        ("num_experts", 10**6),
    ],
)
def test_moe_fields_of_the_wrong_type_are_input_errors(key, value):
    with pytest.raises(InputError) as info:
        from_hf_config({**MOE, key: value}, ident="x")
    assert info.value.field == key


@pytest.mark.parametrize(
    "published",
    [[1, 2], "20B", {"value": float("inf")}, {"value": -1}, {"source": ["x"]}, 7],
)
def test_published_params_must_be_a_mapping_of_numbers(write, published):
    import yaml

    raw = {"id": "m", "config": dict(LLAMA), "published_params": published}
    path = write("m.yaml", yaml.safe_dump(raw))
    with pytest.raises(InputError) as info:
        load_model(path)
    assert info.value.field.startswith("published_params")
    assert info.value.file == str(path)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("id", "x" * 300, "at most 128"),
        ("id", "a\u202eb", "control character"),
        ("name", "two\nlines", "line break"),
        ("hf_id", ["org/name"], "must be text"),
    ],
)
def test_model_file_ids_and_names_are_plain_bounded_text(write, key, value, fragment):
    import yaml

    raw = {"id": "m", "config": dict(LLAMA), key: value}
    path = write("m.yaml", yaml.safe_dump(raw))
    with pytest.raises(InputError, match=fragment) as info:
        load_model(path)
    assert info.value.field == key


@pytest.mark.parametrize("key", ["model", "hardware"])
def test_a_scenario_naming_an_overlong_path_exits_2(cli, tmp_path, key):
    fields = {"model": "llama-3.1-8b", "hardware": "t4-pcie3", key: "a" * 300 + ".yaml"}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"hardware: {fields['hardware']}\nmodel: {fields['model']}\n"
        "workload: {batch: 1, prompt: 1000, generate: 8}\n"
    )
    line = one_line_exit_2(cli("predict", scenario))
    assert f"at most {MAX_NAME_BYTES}" in line


def test_hardware_validate_of_a_6000_byte_path_exits_2(cli):
    path = "a/" * 2997 + "box.yaml"  # 6,002 bytes: past PATH_MAX, so stat() itself would raise
    line = one_line_exit_2(cli("hardware", "validate", path))
    assert "the path is 6002 bytes long; at most 4096 are allowed" in line


def test_hardware_show_of_a_300_character_id_exits_2(cli):
    line = one_line_exit_2(cli("hardware", "show", "x" * 300))
    assert "unknown system id" in line
    assert "x" * 300 not in line  # shortened in the error


@pytest.mark.parametrize("char", ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85"])
@pytest.mark.parametrize("where", ["file", "field", "problem"])
def test_an_input_error_is_one_line_whatever_its_parts_hold(char, where):
    parts = {"file": "f.json", "field": "key", "problem": "unknown field"}
    parts[where] = f"a{char}b{chr(0x2028)}c{chr(0x2029)}d\x1be"
    text = str(InputError(parts["problem"], file=parts["file"], field=parts["field"]))
    assert len(text.splitlines()) == 1, repr(text)
    assert text.isprintable(), repr(text)  # no escape sequence reaches the terminal either


def test_a_mapping_key_with_a_carriage_return_is_shown_escaped(write):
    from kvoffload.engines.scenario import load_scenario

    path = write("s.json", '{"hardware": "t4-pcie3", "model": "qwen2.5-7b", "\\r": 1}')
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert str(info.value).endswith(r"\r: unknown field")
    assert len(str(info.value).splitlines()) == 1

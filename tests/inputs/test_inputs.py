"""Reading input files: refuse what is malformed, unsafe or absurd, quickly."""

from __future__ import annotations

import pytest

from kvoffload.inputs.errors import InputError
from kvoffload.inputs.files import MAX_FILE_BYTES, load_mapping, parse_json, parse_yaml
from tests.support.samples import BOMB


def test_alias_bomb_is_refused_before_expansion():
    with pytest.raises(InputError, match="aliases are not allowed"):
        parse_yaml(BOMB, "bomb.yaml")


def test_duplicate_key_is_refused():
    with pytest.raises(InputError, match="duplicate key 'gpu'"):
        parse_yaml("gpu: a100-80gb-sxm\ngpu: h100-sxm\n", "dup.yaml")


def test_deep_nesting_is_refused():
    with pytest.raises(InputError, match="nested deeper"):
        parse_yaml("a: " + "[" * 100 + "]" * 100, "deep.yaml")


def test_python_tags_are_not_constructed():
    with pytest.raises(InputError, match="malformed YAML"):
        parse_yaml("a: !!python/object/apply:os.system ['true']", "evil.yaml")


def test_malformed_yaml_names_line():
    with pytest.raises(InputError, match=r"malformed YAML at line 3"):
        parse_yaml("a: 1\nb: [1, 2\n", "bad.yaml")


def test_non_utf8_file(write):
    path = write("latin1.yaml", "name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        load_mapping(path)


def test_oversized_file(write):
    path = write("big.yaml", "a: " + "x" * (MAX_FILE_BYTES + 10))
    with pytest.raises(InputError, match="larger than"):
        load_mapping(path)


def test_top_level_must_be_mapping(write):
    with pytest.raises(InputError, match="top level must be a mapping, got list"):
        load_mapping(write("list.yaml", "- 1\n- 2\n"))
    with pytest.raises(InputError, match="got empty"):
        load_mapping(write("empty.yaml", ""))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_mapping(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="is a directory"):
        load_mapping(tmp_path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": NaN}', "NaN is not a number"),
        ('{"a": 1, "a": 2}', "duplicate key"),
        ('{"a": 1,', "malformed JSON at line 1"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_json_strictness(text, fragment):
    with pytest.raises(InputError, match=fragment):
        parse_json(text, "config.json")


def test_error_message_is_one_line_with_file_and_field():
    err = InputError("must be\n positive", field="bandwidth").within(file="p.yaml", field="link")
    assert str(err) == "p.yaml: link.bandwidth: must be positive"

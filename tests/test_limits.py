"""memtap.limits: the depth-bounded JSON loader and the checks of tool arguments, directly."""

from __future__ import annotations

import json

import pytest

from memtap.errors import ContentTooLarge, InvalidArguments
from memtap.limits import (
    Limits,
    TooDeep,
    bound_schema,
    check_arguments,
    check_metadata,
    first_unencodable,
    load_json,
)
from memtap.proxy.tools import TOOLS, parse_arguments


def test_load_json_refuses_nesting_past_the_cap_and_counts_no_brackets_inside_strings() -> None:
    assert load_json("[" * 8 + "]" * 8, max_depth=8) == json.loads("[" * 8 + "]" * 8)
    with pytest.raises(TooDeep, match="more than 8 deep"):
        load_json("[" * 9 + "]" * 9, max_depth=8)
    with pytest.raises(TooDeep):
        load_json(b'{"a":' * 5000 + b"1" + b"}" * 5000)  # past Python's own parser limit
    text = json.dumps({"content": "[" * 500 + "{" * 500})  # brackets in a string are not nesting
    assert load_json(text, max_depth=2) == {"content": "[" * 500 + "{" * 500}


def test_first_unencodable_names_where_a_lone_surrogate_is() -> None:
    body = json.loads(
        '{"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "\\ud800"}]}'
    )
    assert first_unencodable(body) == "messages[1].content"
    assert first_unencodable({"fine": ["é", "😀"]}) is None


def test_check_arguments_names_the_field_and_the_cap() -> None:
    limits = Limits(max_field_chars=20, max_metadata_bytes=50, max_json_depth=4)
    add = parse_arguments(TOOLS["memory_add"], {"content": "x" * 11, "metadata": {"k": "v" * 60}})
    with pytest.raises(ContentTooLarge, match="content is 11 bytes; the limit is 10 bytes"):
        check_arguments("memory_add", add, max_content_bytes=10, limits=limits)
    with pytest.raises(InvalidArguments, match=r"memory_add: metadata: \d+ bytes as JSON; the limit is 50"):
        check_arguments("memory_add", add, max_content_bytes=100, limits=limits)
    nested = parse_arguments(TOOLS["memory_add"], {"content": "x", "metadata": {"a": [[[[1]]]]}})
    with pytest.raises(InvalidArguments, match="nested more than 4 deep"):
        check_arguments("memory_add", nested, max_content_bytes=100, limits=limits)
    denied = parse_arguments(TOOLS["memory_add"], {"content": "x", "access": {"deny": ["ok", "d" * 21]}})
    with pytest.raises(
        InvalidArguments, match=r"memory_add: access: deny\[1\]: 21 characters; the limit is 20"
    ):
        check_arguments("memory_add", denied, max_content_bytes=100, limits=limits)


def test_content_and_query_are_measured_in_utf8_bytes() -> None:
    limits = Limits(max_field_chars=20)
    for tool, field in (("memory_add", "content"), ("memory_search", "query")):
        ascii_text = parse_arguments(TOOLS[tool], {field: "x" * 10})
        check_arguments(tool, ascii_text, max_content_bytes=10, limits=limits)
        wide = parse_arguments(TOOLS[tool], {field: "é" * 6})  # 6 characters, 12 bytes
        with pytest.raises(ContentTooLarge, match=f"{field} is 12 bytes; the limit is 10 bytes"):
            check_arguments(tool, wide, max_content_bytes=10, limits=limits)


def test_metadata_is_measured_as_compact_utf8_json_and_must_be_json_text() -> None:
    limits = Limits(max_metadata_bytes=27)
    check_metadata("m", {"a": "é" * 9}, limits)  # {"a":"ééééééééé"}: 26 bytes
    with pytest.raises(InvalidArguments, match="m: 28 bytes as JSON; the limit is 27 bytes"):
        check_metadata("m", {"a": "é" * 10}, limits)
    with pytest.raises(InvalidArguments, match="m: not valid UTF-8 text"):
        check_metadata("m", {"a": ["\ud800"]}, limits)
    with pytest.raises(InvalidArguments, match="m: not JSON"):
        check_metadata("m", {"a": object()}, limits)


def test_bound_schema_caps_every_string_but_content_and_query() -> None:
    schema = bound_schema(TOOLS["memory_add"].args.model_json_schema(), Limits(max_field_chars=7))
    props = schema["properties"]
    assert "maxLength" not in props["content"]
    assert {"type": "string", "maxLength": 7} in props["namespace"]["anyOf"]
    access = schema["$defs"]["AccessArg"]["properties"]
    assert (
        access["deny"]["items"] == {"type": "string", "maxLength": 7} and access["deny"]["maxItems"] == 1000
    )

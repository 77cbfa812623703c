"""Lifecycle classification of upstream tools: rules, profiles, annotations, names."""

from __future__ import annotations

from typing import Any

import pytest

from memtap.adapters.profiles import PROFILES, ToolKind, classify_tools, detect_profile, find_profile
from memtap.errors import ConfigError
from memtap.trace.models import Op

REFERENCE_TOOLS = [
    "create_entities", "create_relations", "add_observations", "delete_entities", "delete_observations",
    "delete_relations", "read_graph", "search_nodes", "open_nodes",
]  # fmt: skip


def classes(tools: list[tuple[str, dict[str, Any] | None]], **kwargs: Any) -> dict[str, tuple[str, str]]:
    found = classify_tools(tools, **kwargs)
    return {name: (c.kind.value, c.source) for name, c in found.items()}


@pytest.mark.parametrize(
    ("server", "tools", "profile"),
    [
        ("memory-server", REFERENCE_TOOLS, "server-memory"),
        ("a-renamed-fork", REFERENCE_TOOLS, "server-memory"),  # by the tools only it has
        ("Graphiti Agent Memory", ["add_memory", "search_memory_facts", "delete_episode"], "graphiti"),
        (None, ["add_memory", "search_memories", "delete_all_memories"], "mem0"),
        (None, ["archival_memory_insert", "archival_memory_search", "core_memory_replace"], "letta"),
        ("mcp-memory-libsql", ["create_entities", "search_nodes", "read_graph"], "memory-libsql"),
        (
            "a-libsql-fork",
            ["create_entities", "delete_entity", "delete_relation", "search_nodes"],
            "memory-libsql",
        ),
        ("memory-keeper", ["context_save", "context_get"], "memory-keeper"),
        (None, ["context_save", "context_get", "context_batch_delete", "context_status"], "memory-keeper"),
        ("weather", ["get_forecast"], None),
    ],
)
def test_known_servers_are_detected_by_name_or_by_the_tools_only_they_have(
    server: str | None, tools: list[str], profile: str | None
) -> None:
    found = detect_profile(server, tools)
    assert (found.name if found else None) == profile


def test_reference_server_vocabulary_classifies_every_tool() -> None:
    got = classes([(t, None) for t in REFERENCE_TOOLS], profile=PROFILES["server-memory"])
    assert got == {
        "create_entities": ("write", "profile"), "create_relations": ("write", "profile"),
        "add_observations": ("write", "profile"), "delete_entities": ("delete", "profile"),
        "delete_observations": ("delete", "profile"), "delete_relations": ("delete", "profile"),
        "read_graph": ("read", "profile"), "search_nodes": ("retrieve", "profile"),
        "open_nodes": ("read", "profile"),
    }  # fmt: skip


def test_rules_override_profiles_exact_names_before_patterns() -> None:
    rules = {"search_*": "read", "search_nodes": "other", "add_observations": "update"}
    got = classes(
        [("search_nodes", None), ("search_more", None), ("add_observations", None), ("open_nodes", None)],
        profile=PROFILES["server-memory"],
        rules=rules,
    )
    assert got == {
        "search_nodes": ("other", "rule"),
        "search_more": ("read", "rule"),
        "add_observations": ("update", "rule"),
        "open_nodes": ("read", "profile"),
    }


def test_annotations_come_before_names_and_names_before_the_default() -> None:
    got = classes(
        [
            ("fetch_everything", {"readOnlyHint": True}),
            ("semantic_lookup", {"readOnlyHint": True}),
            ("purge_cache", {"readOnlyHint": False, "destructiveHint": True}),
            ("tweak", {"readOnlyHint": False, "destructiveHint": True}),
            ("remove_thing", {"readOnlyHint": False, "destructiveHint": False}),  # annotations say additive
            ("forgetUserFact", None),
            ("rememberThis", {}),
            ("conversation_search", None),
            ("ping", None),
        ],
        profile=None,
    )
    assert got == {
        "fetch_everything": ("read", "annotations"),
        "semantic_lookup": ("retrieve", "annotations"),
        "purge_cache": ("delete", "annotations"),
        "tweak": ("update", "annotations"),
        "remove_thing": ("write", "annotations"),
        "forgetUserFact": ("delete", "name"),
        "rememberThis": ("write", "name"),
        "conversation_search": ("retrieve", "name"),
        "ping": ("other", "default"),
    }


def test_other_is_recorded_as_control_and_each_class_maps_to_its_op() -> None:
    assert [k.op for k in ToolKind] == [Op.WRITE, Op.UPDATE, Op.DELETE, Op.RETRIEVE, Op.READ, Op.CONTROL]


def test_unknown_profile_name_is_a_config_error_and_none_means_no_profile() -> None:
    assert find_profile("none") is None
    with pytest.raises(
        ConfigError,
        match="unknown profile 'mem1'; known: none, server-memory, memory-libsql, memory-keeper, graphiti",
    ):
        find_profile("mem1")

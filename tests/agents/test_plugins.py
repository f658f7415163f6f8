"""Plugin tables: fixed at construction, built by name, clear about unknown names."""

import pytest

from agents.plugins import PluginTable


def test_a_table_builds_plugins_by_name_with_their_arguments():
    table = PluginTable("greeting", {"hello": lambda name="world": f"hello {name}"})
    assert table.create("hello") == "hello world"
    assert table.create("hello", name="agent") == "hello agent"
    assert list(table) == ["hello"] and "hello" in table and len(table) == 1


def test_an_unknown_name_lists_the_known_ones():
    table = PluginTable("timer", {"cpu": object, "cuda-graph": object})
    with pytest.raises(KeyError, match="no timer named 'gpu'; known: cpu, cuda-graph"):
        table.create("gpu")

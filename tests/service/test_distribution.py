"""The schema stays ready for Citus: what distributes each table, and the rules that needs."""

from __future__ import annotations

from sqlalchemy import ForeignKeyConstraint, PrimaryKeyConstraint, UniqueConstraint

from services.profiler_api.distribution import DISTRIBUTED, REFERENCE
from services.profiler_api.orm import Base


def test_every_table_is_either_distributed_or_a_reference_table() -> None:
    assert set(DISTRIBUTED) | REFERENCE == set(Base.metadata.tables)
    assert not set(DISTRIBUTED) & REFERENCE


def test_unique_keys_of_distributed_tables_include_their_distribution_column() -> None:
    for name, column in DISTRIBUTED.items():
        table = Base.metadata.tables[name]
        uniques = [
            {c.name for c in constraint.columns}
            for constraint in table.constraints
            if isinstance(constraint, PrimaryKeyConstraint | UniqueConstraint)
        ]
        uniques += [{c.name for c in index.columns} for index in table.indexes if index.unique]
        uniques += [{c.name} for c in table.columns if c.unique]
        assert uniques, name
        for columns in uniques:
            assert column in columns, (name, columns)


def test_distributed_tables_refer_only_to_reference_tables() -> None:
    for name in DISTRIBUTED:
        for constraint in Base.metadata.tables[name].constraints:
            if isinstance(constraint, ForeignKeyConstraint):
                assert constraint.referred_table.name in REFERENCE, (name, constraint)

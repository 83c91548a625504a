"""The outcome rows go to the driver as tuples: their order must be the table's, in either parameter style."""

from __future__ import annotations

import pytest

from cliffwatch.adapters.store import outcomes_sql
from cliffwatch.adapters.store.tables import request_outcomes
from cliffwatch.domain.service.runs import OUTCOME_FIELDS


def test_the_tuples_follow_the_tables_columns_in_order() -> None:
    assert tuple(column.name for column in request_outcomes.columns) == OUTCOME_FIELDS == outcomes_sql.COLUMNS


@pytest.mark.parametrize(("style", "first", "last"), [("qmark", "?", "?"), ("numeric_dollar", "$1", "$18")])
def test_the_insert_speaks_the_drivers_parameter_style_and_keeps_a_first_record(
    style: str, first: str, last: str
) -> None:
    sql = outcomes_sql._insert(style)

    assert sql.startswith("INSERT INTO request_outcomes (run_id, request_id, phase,")
    assert f"VALUES ({first}, " in sql
    assert f", {last}) ON CONFLICT (run_id, request_id) DO NOTHING" in sql
    assert len(OUTCOME_FIELDS) == 18


def test_a_driver_of_another_style_is_refused_rather_than_sent_a_wrong_statement() -> None:
    with pytest.raises(ValueError, match="pyformat"):
        outcomes_sql._insert("pyformat")

"""The indexes the product brief names exist, and none that every write pays for twice."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def index_columns(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return {name: definition.split(" USING btree ", 1)[1] for name, definition in cursor}


def test_the_product_briefs_indexes_exist():
    assert "(status, next_run_at)" in index_columns("chrono_job").values()
    assert "(job_id, started_at)" in index_columns("chrono_execution").values()
    assert "(last_heartbeat_at)" in index_columns("chrono_worker").values()


@pytest.mark.parametrize("table", ["chrono_job", "chrono_execution"])
def test_no_index_is_a_plain_prefix_of_another(table):
    """Each index costs every insert and every status change; one whose columns begin another
    (with no condition of its own) is pure cost."""
    plain = {name: cols.strip("()").split(", ") for name, cols in index_columns(table).items()
             if " WHERE " not in cols and "UNIQUE" not in cols}
    redundant = [(a, b) for a, cols_a in plain.items() for b, cols_b in plain.items()
                 if a != b and not a.endswith("_pkey") and cols_b[: len(cols_a)] == cols_a]
    assert redundant == []

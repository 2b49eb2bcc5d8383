from django.db import migrations

# A run's state is one JSON document rewritten whole by every engine pass over the run: for a
# map of 10,000 instances, 550 kB a pass. PostgreSQL compresses it on every write (TOAST), and
# with its default (pglz) that took 29 ms of the backend's CPU a write, with lz4 16 ms
# (stored 60 and 70 kB; bench/RESULTS.md, session 23). lz4 is an option of PostgreSQL's build
# (Debian's and the usual packages have it): where it is missing the column keeps pglz, and
# the migration says so rather than failing. Only new writes are compressed anew.
SET_LZ4 = """
DO $$
BEGIN
  ALTER TABLE chrono_workflow_run ALTER COLUMN state SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'this PostgreSQL has no lz4: chrono_workflow_run.state stays compressed with pglz';
END
$$;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('workflows', '0004_run_definition_index'),
    ]

    operations = [
        migrations.RunSQL(
            SET_LZ4,
            reverse_sql="ALTER TABLE chrono_workflow_run ALTER COLUMN state SET COMPRESSION pglz",
        ),
    ]

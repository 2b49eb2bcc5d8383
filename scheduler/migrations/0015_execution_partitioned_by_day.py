# chrono_execution becomes a table partitioned by range of scheduled_for, one partition per UTC
# day (chrono_execution_pYYYYMMDD) and a default partition (chrono_execution_default) that
# catches a row no day partition holds (a misfire row for a day already dropped, a partition
# the retention job has not created yet), so an insert never fails for want of a partition.
# scheduler/partitions.py creates the days ahead and drops the expired ones (chrono retention,
# the reaper); docs/architecture.md, "Executions partitioned by day", says why.
#
# A partitioned table's unique constraints must include the partition key, so the primary key
# in PostgreSQL is (execution_id, scheduled_for); Django's model keeps execution_id as its
# primary key (an execution id is unique on its own: uuid5 of job id and fire ms, or a random
# uuid4, and its scheduled_for is the fire ms), so the ORM, the admin and the API are unchanged,
# and the model state needs no migration. The beat's ON CONFLICT names (execution_id,
# scheduled_for), the unique index that exists.
#
# The conversion copies the rows (one statement under an exclusive lock; not measured, expect
# minutes for 10 M rows: stop the beats, workers and reaper first) and re-creates on the new table every index,
# foreign key and trigger the old one had, read from the catalog, so what earlier migrations
# built (chrono_execution_ended, the partial indexes) is kept exactly. The reverse does the same
# back into a plain table with the primary key (execution_id).
#
# execution_scheduled_for_idx becomes (scheduled_for, execution_id): the statements of the hot
# path name an execution by (execution_id, scheduled_for), so that PostgreSQL touches one day's
# partition, and with the index on scheduled_for alone the planner may take that index for such
# a look-up when its statistics make every fire time look unique (a day's partition analysed
# before the burst of the minute was written), and then reads every execution of that
# millisecond to find one (10,000 index entries for a cron burst of 10,000 jobs). With the id as
# its second column, either index finds the row in one entry; the range scans and the
# (-scheduled_for, -pk) order of the API's lists read it as before.

from django.db import migrations, models

# The definitions of the table's indexes (but its primary key), foreign keys and triggers,
# re-created on the table that replaces it. "ON ONLY" (a partitioned table's own index) is
# said plainly, so that the statement builds the index of every partition, or of a plain table.
_CAPTURE = """
  SELECT coalesce(array_agg(replace(indexdef, ' ON ONLY ', ' ON ')), '{}') INTO idx
    FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'chrono_execution'
    AND indexname <> 'chrono_execution_pkey';
  SELECT coalesce(array_agg(format('ALTER TABLE chrono_execution ADD CONSTRAINT %I %s',
                                   conname, pg_get_constraintdef(oid))), '{}') INTO fks
    FROM pg_constraint WHERE conrelid = 'chrono_execution'::regclass AND contype = 'f';
  SELECT coalesce(array_agg(pg_get_triggerdef(oid)), '{}') INTO trg
    FROM pg_trigger WHERE tgrelid = 'chrono_execution'::regclass AND NOT tgisinternal;
"""
# A partition's index is named <partition>_<its parent index> (chrono_execution_p20261201_
# execution_job_active_idx), not PostgreSQL's <partition>_<columns>_idx, so that a plan names
# the index it uses as the model does. scheduler/partitions.py names a new day's the same way.
_NAME_PARTITION_INDEXES = """
  FOR r IN SELECT ci.relname AS index_name, pi.relname AS parent_name, ct.relname AS tbl
    FROM pg_inherits ih JOIN pg_class ci ON ci.oid = ih.inhrelid
    JOIN pg_class pi ON pi.oid = ih.inhparent JOIN pg_index x ON x.indexrelid = ci.oid
    JOIN pg_class ct ON ct.oid = x.indrelid JOIN pg_inherits th ON th.inhrelid = ct.oid
    WHERE th.inhparent = 'chrono_execution'::regclass
  LOOP
    EXECUTE format('ALTER INDEX %I RENAME TO %I', r.index_name,
                   left(r.tbl || '_' || r.parent_name, 63));
  END LOOP;
"""
_LIKE = ("INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS")

PARTITION = f"""
DO $$
DECLARE
  idx text[]; fks text[]; trg text[]; stmt text; d date; r record;
  today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
  LOCK TABLE chrono_execution IN ACCESS EXCLUSIVE MODE;
  DROP INDEX execution_scheduled_for_idx;
  {_CAPTURE}
  ALTER TABLE chrono_execution RENAME TO chrono_execution_unpartitioned;
  CREATE TABLE chrono_execution (LIKE chrono_execution_unpartitioned {_LIKE})
    PARTITION BY RANGE (scheduled_for);
  CREATE TABLE chrono_execution_default PARTITION OF chrono_execution DEFAULT;
  FOR d IN
    SELECT DISTINCT (scheduled_for AT TIME ZONE 'UTC')::date FROM chrono_execution_unpartitioned
    UNION SELECT generate_series((today - 1)::timestamp, (today + 7)::timestamp,
                                 interval '1 day')::date
  LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF chrono_execution FOR VALUES FROM (%L) TO (%L)',
                   'chrono_execution_p' || to_char(d, 'YYYYMMDD'),
                   d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
  END LOOP;
  INSERT INTO chrono_execution SELECT * FROM chrono_execution_unpartitioned;
  DROP TABLE chrono_execution_unpartitioned;
  ALTER TABLE chrono_execution
    ADD CONSTRAINT chrono_execution_pkey PRIMARY KEY (execution_id, scheduled_for);
  FOREACH stmt IN ARRAY idx || fks || trg LOOP EXECUTE stmt; END LOOP;
  CREATE INDEX execution_scheduled_for_idx ON chrono_execution (scheduled_for, execution_id);
  {_NAME_PARTITION_INDEXES}
END $$;
"""  # nosec B608 # module constants only, no input

UNPARTITION = f"""
DO $$
DECLARE
  idx text[]; fks text[]; trg text[]; stmt text;
BEGIN
  LOCK TABLE chrono_execution IN ACCESS EXCLUSIVE MODE;
  DROP INDEX execution_scheduled_for_idx;
  {_CAPTURE}
  ALTER TABLE chrono_execution RENAME TO chrono_execution_partitioned;
  CREATE TABLE chrono_execution (LIKE chrono_execution_partitioned {_LIKE});
  INSERT INTO chrono_execution SELECT * FROM chrono_execution_partitioned;
  DROP TABLE chrono_execution_partitioned;
  ALTER TABLE chrono_execution ADD CONSTRAINT chrono_execution_pkey PRIMARY KEY (execution_id);
  FOREACH stmt IN ARRAY idx || fks || trg LOOP EXECUTE stmt; END LOOP;
  CREATE INDEX execution_scheduled_for_idx ON chrono_execution (scheduled_for);
END $$;
"""  # nosec B608 # module constants only, no input


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0014_calendars'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(PARTITION, UNPARTITION)],
            state_operations=[
                migrations.RemoveIndex(model_name='execution',
                                       name='execution_scheduled_for_idx'),
                migrations.AddIndex(
                    model_name='execution',
                    index=models.Index(fields=['scheduled_for', 'execution_id'],
                                       name='execution_scheduled_for_idx'),
                ),
            ],
        ),
    ]

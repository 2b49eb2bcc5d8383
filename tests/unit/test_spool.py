"""The execution-log spool (search/spool.py): whole lines only, offsets committed by the reader,
a segment finished only when its writer let go of it (a process killed with SIGKILL included),
a cut tail of a killed writer skipped, shipped segments deleted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from search.spool import OFFSET_SUFFIX, SpoolReader, SpoolWriter


def lines(count: int, start: int = 0) -> bytes:
    return b"".join(b'e:1:%d\t{"n":%d}\n' % (i, i) for i in range(start, start + count))


def test_lines_are_read_once_their_offsets_are_committed_and_again_when_they_are_not(tmp_path):
    writer = SpoolWriter(tmp_path, writer="w1", segment_bytes=1 << 20)
    writer.write(lines(10))
    reader = SpoolReader(tmp_path, batch_bytes=1 << 20)
    first = reader.read_batch()
    assert [doc_id for doc_id, _ in first.lines] == [f"e:1:{i}" for i in range(10)]
    again = SpoolReader(tmp_path, batch_bytes=1 << 20).read_batch()  # a restarted shipper
    assert again.lines == first.lines, "nothing committed: everything is read again"
    reader.commit(first)
    writer.write(lines(5, start=10))
    assert [d for d, _ in SpoolReader(tmp_path, batch_bytes=1 << 20).read_batch().lines] == [
        f"e:1:{i}" for i in range(10, 15)]


def test_a_batch_stops_at_its_budget_on_a_line_boundary(tmp_path):
    writer = SpoolWriter(tmp_path, writer="w1", segment_bytes=1 << 20)
    writer.write(lines(100))
    reader = SpoolReader(tmp_path, batch_bytes=200)
    seen = []
    while (batch := reader.read_batch()).lines:
        assert batch.bytes_read <= 200
        seen += [doc_id for doc_id, _ in batch.lines]
        reader.commit(batch)
    assert seen == [f"e:1:{i}" for i in range(100)]


def test_a_line_still_being_written_waits_while_its_writer_lives(tmp_path):
    writer = SpoolWriter(tmp_path, writer="w1", segment_bytes=1 << 20)
    writer.write(lines(1))
    with open(next(tmp_path.glob("*.ndjson")), "ab") as segment:
        segment.write(b'e:1:9\t{"half')
    reader = SpoolReader(tmp_path, batch_bytes=1 << 20)
    batch = reader.read_batch()
    reader.commit(batch)
    assert len(batch.lines) == 1 and batch.torn_bytes == 0
    assert reader.read_batch().offsets == {}, "the unfinished line is left for later"


def test_rotated_segments_are_finished_and_deleted_once_shipped_the_current_one_is_not(
        tmp_path):
    writer = SpoolWriter(tmp_path, writer="w1", segment_bytes=100)
    for start in range(0, 30, 3):
        writer.write(lines(3, start=start))
    segments = sorted(tmp_path.glob("*.ndjson"))
    assert len(segments) > 2
    reader = SpoolReader(tmp_path, batch_bytes=1 << 20)
    reader.commit(reader.read_batch())
    assert sorted(tmp_path.glob("*.ndjson")) == segments[-1:], "the writer's own stays"
    writer.close()
    reader.delete_shipped()
    assert list(tmp_path.iterdir()) == []


WRITER = textwrap.dedent("""
    import sys, time
    from search.spool import SpoolWriter
    writer = SpoolWriter(sys.argv[1], writer="doomed", segment_bytes=1 << 20)
    writer.write(b'e:1:1\\t{"n":1}\\n')
    writer.sync()
    import os
    os.write(writer._fd, b'e:1:2\\t{"cut in the mid')
    print("written", flush=True)
    time.sleep(60)
""")


def test_a_writer_killed_with_sigkill_leaves_its_whole_lines_and_its_cut_tail_is_skipped(
        tmp_path):
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                             stdout=subprocess.PIPE, cwd=os.getcwd())
    assert child.stdout.readline() == b"written\n"
    reader = SpoolReader(tmp_path, batch_bytes=1 << 20)
    alive = reader.read_batch()
    reader.commit(alive)
    assert [d for d, _ in alive.lines] == ["e:1:1"] and alive.torn_bytes == 0
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    dead = reader.read_batch()
    assert dead.lines == [] and dead.torn_bytes == len(b'e:1:2\t{"cut in the mid')
    reader.commit(dead)
    assert list(tmp_path.iterdir()) == [], "finished and shipped: deleted"


def test_an_unreadable_offset_ships_the_segment_again_from_its_start(tmp_path):
    writer = SpoolWriter(tmp_path, writer="w1", segment_bytes=1 << 20)
    writer.write(lines(3))
    segment = next(tmp_path.glob("*.ndjson"))
    segment.with_name(segment.name + OFFSET_SUFFIX).write_text("garbage")
    assert len(SpoolReader(tmp_path, batch_bytes=1 << 20).read_batch().lines) == 3

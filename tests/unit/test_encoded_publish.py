"""Messages encoded ahead of their publish (scheduler.dispatch.encode_for_publish) are the very
frames py-amqp writes for a ``basic_publish`` of the same message, stamp included."""

from __future__ import annotations

from types import SimpleNamespace

from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

from scheduler.beat import _task_message
from scheduler.dispatch import (
    DISPATCH_EXCHANGE,
    ENCODED_CHANNEL,
    ENCODED_FRAME_MAX,
    TaskMessage,
    encode_for_publish,
)
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.occurrences import DueJob
from scheduler.retry import effective_policy


def _py_amqp_frames(message: TaskMessage, published_ms: int, origin: str = "o") -> bytes:
    written: list[bytes] = []
    writer = frame_writer(SimpleNamespace(frame_max=ENCODED_FRAME_MAX, bytes_sent=0),
                          SimpleNamespace(write=lambda data: written.append(bytes(data))))
    content = message.encode(origin=origin)
    content.application_headers["chrono_published_ms"] = published_ms
    writer(1, ENCODED_CHANNEL, spec.Basic.Publish,
           dumps("Bssbb", (0, DISPATCH_EXCHANGE, message.queue, False, False)), content)
    return b"".join(written)


def _stamped(frames: bytes, offset: int, published_ms: int) -> bytes:
    data = bytearray(frames)
    data[offset:offset + 8] = published_ms.to_bytes(8, "big", signed=True)
    return bytes(data)


def test_frames_encoded_ahead_equal_py_amqp_s_once_stamped():
    for body in ("small", "é" * 100_000):  # one body frame; several
        message = TaskMessage(task_id="t-1", task_name="billing.charge", queue="billing",
                              args=[1], kwargs={"text": body},
                              chrono_headers={"chrono_attempt": 1, "chrono_fire_ms": 5})
        encoded = encode_for_publish(message, origin="o")
        published_ms = 1_764_604_800_042
        assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
                == _py_amqp_frames(message, published_ms))


def test_frames_encoded_ahead_equal_py_amqp_s_for_every_kind_of_header_value():
    # Every type a header can hold here: the beat's own (str, int under and over 32 bits, None,
    # bool, float, a list) and what a caller's chrono_headers may add (a nested table, a tuple,
    # bytes, a non-ASCII key and value, an int subclass and a Decimal through py-amqp's writer).
    from decimal import Decimal
    from enum import IntEnum

    class Tier(IntEnum):
        GOLD = 3

    headers = {"chrono_attempt": 1, "chrono_fire_ms": 1_764_604_800_000, "negative": -5,
               "big_negative": -2**40, "flag": True, "off": False, "ratio": 0.25,
               "nothing": None, "listed": [1, "two", None, [3.5]], "paired": (1, 2),
               "nested": {"a": {"b": [True]}}, "raw": b"\x00\xff", "clé": "valeur é",
               "tier": Tier.GOLD, "price": Decimal("12.34")}
    message = TaskMessage(task_id="t-2", task_name="billing.charge", queue="billing",
                          args_json="[1]", kwargs_json='{"x":"é"}', soft_timeout_ms=1_500,
                          hard_timeout_ms=None, chrono_headers=headers)
    encoded = encode_for_publish(message, origin="chrono-beat@host")
    published_ms = 1_764_604_800_042
    assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
            == _py_amqp_frames(message, published_ms, origin="chrono-beat@host"))


def _beat_job(**fields: object) -> DueJob:
    values: dict[str, object] = {
        "job_id": "0b3a63d1-4a55-4b53-9d43-3f4c1b3a0f01", "tenant_id": "tenant-1",
        "job_type": "billing.charge", "args_json": "[1]", "kwargs_json": '{"x":"é"}',
        "queue": "billing", "cron_expression": None, "timezone": "UTC", "status": "ACTIVE",
        "next_run_ms": 1_764_604_800_000, "misfire": MisfireRule(MisfirePolicy.FIRE_ONCE, 1),
        "jitter_ms": 0, "retry": effective_policy({}, 0), "soft_timeout_ms": None,
        "hard_timeout_ms": None, "overlap_policy": "allow", "idempotency_key": None}
    return DueJob(**{**values, **fields})


def test_beat_messages_from_a_shared_template_equal_py_amqp_s_frames():
    # The beat's messages share a headers template per signature (the task, its payload, its
    # tenant, policy, lease…): the varying headers (ids, fire time, the job's id and key) of
    # every message written into it give py-amqp's very bytes, whichever message made it.
    jobs = [_beat_job(),
            _beat_job(job_id="7c1e2a10-8d0a-4e59-9a55-0c5f7c1e2a10", idempotency_key="key-é"),
            _beat_job(job_id="1c1e2a10-8d0a-4e59-9a55-0c5f7c1e2a10", idempotency_key=None),
            _beat_job(soft_timeout_ms=1_500, hard_timeout_ms=3_000),
            _beat_job(tenant_id="tenant-2", args_json="[" + "7," * 200 + "7]"),
            _beat_job(args_json="[2]", retry=effective_policy({"max_attempts": 3}, 0))]
    published_ms = 1_764_604_800_042
    for fire_ms in (1_764_604_800_000, 1_764_604_860_000, 5):  # a small one: 'I', not 'L'
        for lease in ("replica-a|7", "replica-b|8"):
            for job in jobs:
                message = _task_message(job, fire_ms, lease)
                encoded = encode_for_publish(message, origin="chrono-beat@host")
                assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
                        == _py_amqp_frames(message, published_ms, origin="chrono-beat@host"))


def test_a_signature_tells_apart_values_that_compare_equal_across_types():
    # True == 1 and hash alike: a header holding one and then the other must not share a
    # template (their bytes differ), nor may an int timeout and a float one.
    published_ms = 1_764_604_800_042
    for attempt in (1, True, 1, True):
        for soft in (1_500, 1_500.0):
            message = TaskMessage(task_id="t-3", task_name="a.b", queue="q", args_json="[]",
                                  kwargs_json="{}", soft_timeout_ms=soft,
                                  chrono_headers={"chrono_execution_id": "t-3",
                                                  "chrono_attempt": attempt})
            encoded = encode_for_publish(message, origin="o")
            assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
                    == _py_amqp_frames(message, published_ms))


def test_headers_of_other_shapes_are_encoded_header_by_header():
    # Varying headers missing, added or in another order: a template of their own each.
    published_ms = 1_764_604_800_042
    for chrono_headers in ({"chrono_fire_ms": 5, "chrono_attempt": 1},
                           {"chrono_attempt": 1, "chrono_fire_ms": 5},
                           {"chrono_attempt": 1},
                           {"chrono_attempt": 1, "listed": [1, 2]}):  # unhashable: no template
        message = TaskMessage(task_id="t-4", task_name="a.b", queue="q", args_json="[]",
                              kwargs_json="{}", chrono_headers=dict(chrono_headers))
        encoded = encode_for_publish(message, origin="o")
        assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
                == _py_amqp_frames(message, published_ms))


def test_messages_differing_only_in_their_payload_share_one_template():
    # A fan-out's instances: one task, one tenant, one policy, each its own input. The payload
    # is written each time (argsrepr, kwargsrepr), not built into a template per message.
    from scheduler import amqp_frames

    amqp_frames._templates.clear()
    published_ms = 1_764_604_800_042
    for index in range(50):
        job = _beat_job(job_id=f"0b3a63d1-4a55-4b53-9d43-3f4c1b3a{index:04d}",
                        args_json=f"[{index}]", kwargs_json=f'{{"item":"é{"x" * index}"}}')
        message = _task_message(job, 1_764_604_800_000, "replica-a|7")
        encoded = encode_for_publish(message, origin="chrono-beat@host")
        assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
                == _py_amqp_frames(message, published_ms, origin="chrono-beat@host"))
    long = _beat_job(args_json="[" + "7," * 400 + "7]")  # past argsrepr's length: shortened
    message = _task_message(long, 5, "replica-a|7")
    encoded = encode_for_publish(message, origin="chrono-beat@host")
    assert (_stamped(encoded.frames, encoded.stamp_offset, published_ms)
            == _py_amqp_frames(message, published_ms, origin="chrono-beat@host"))
    assert len(amqp_frames._templates) == 1

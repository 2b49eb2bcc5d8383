"""Messages encoded ahead of their publish (scheduler.dispatch.encode_for_publish) are the very
frames py-amqp writes for a ``basic_publish`` of the same message, stamp included."""

from __future__ import annotations

from types import SimpleNamespace

from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

from scheduler.dispatch import (
    DISPATCH_EXCHANGE,
    ENCODED_CHANNEL,
    ENCODED_FRAME_MAX,
    TaskMessage,
    encode_for_publish,
)


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

"""The publisher against the real RabbitMQ: confirmed batches of Celery protocol v2 messages."""

from __future__ import annotations

import json
import uuid

import amqp
import pytest

from chronocore.config import get_config
from scheduler.dispatch import (
    DISPATCH_EXCHANGE,
    DispatchError,
    Publisher,
    TaskMessage,
    amqp_connection_params,
)


def drain(queue: str) -> list[amqp.Message]:
    messages = []
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        channel = conn.channel()
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            messages.append(message)
    return messages


def test_a_confirmed_batch_lands_in_a_durable_quorum_queue_in_order(queue):
    publisher = Publisher(get_config().broker_url, origin="test")
    messages = [
        TaskMessage(task_id=str(uuid.uuid4()), task_name="chrono.echo", queue=queue,
                    args=[i], kwargs={"k": i}, chrono_headers={"chrono_attempt": 1})
        for i in range(250)
    ]
    publisher.publish_batch(messages)
    publisher.publish_batch(messages[:10])  # the same channel keeps counting delivery tags
    publisher.close()

    received = drain(queue)
    assert len(received) == 260
    assert [json.loads(m.body)[0][0] for m in received[:250]] == list(range(250))
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        # passive declare with different arguments would fail: the queue is a quorum queue
        _, count, _ = conn.channel().queue_declare(queue, passive=True)
        assert count == 0


def test_messages_follow_celery_protocol_v2(queue):
    publisher = Publisher(get_config().broker_url, origin="test-origin")
    task_id = str(uuid.uuid4())
    publisher.publish_batch([
        TaskMessage(task_id=task_id, task_name="chrono.echo", queue=queue, args=[1, "a"],
                    kwargs={"x": 2}, chrono_headers={"chrono_execution_id": task_id})
    ])
    publisher.close()
    (message,) = drain(queue)
    headers = message.headers
    assert headers["task"] == "chrono.echo"
    assert headers["id"] == task_id and headers["root_id"] == task_id
    assert headers["lang"] == "py" and headers["origin"] == "test-origin"
    assert headers["chrono_execution_id"] == task_id
    assert message.properties["delivery_mode"] == 2
    assert message.properties["correlation_id"] == task_id
    assert message.properties["content_type"] == "application/json"
    args, kwargs, embed = json.loads(message.body)
    assert (args, kwargs) == ([1, "a"], {"x": 2})
    assert set(embed) == {"callbacks", "errbacks", "chain", "chord"}
    assert message.delivery_info["exchange"] == DISPATCH_EXCHANGE


def test_an_unreachable_broker_raises_dispatch_error_not_a_silent_drop(queue):
    publisher = Publisher("amqp://guest:guest@127.0.0.1:1//", origin="test")
    with pytest.raises(DispatchError):
        publisher.publish_batch([TaskMessage(task_id="t", task_name="chrono.noop", queue=queue)])


def test_messages_encoded_ahead_arrive_as_sent_with_their_publish_stamp(queue):
    """A burst's messages are encoded while it is prepared and only written at its fire time:
    they reach the queue whole (a body larger than a frame included), in order, confirmed,
    each with the stamp of the write."""
    publisher = Publisher(get_config().broker_url, origin="test")
    big = "x" * 300_000  # three body frames
    messages = [
        TaskMessage(task_id=str(uuid.uuid4()), task_name="chrono.echo", queue=queue,
                    args=[i], kwargs={"k": big if i == 3 else i},
                    chrono_headers={"chrono_attempt": 1, "chrono_fire_ms": 1_764_000_000_000})
        for i in range(50)
    ]
    encoded = publisher.encode(messages)
    publisher.wait(publisher.send_encoded(encoded, 1_764_000_000_123))
    publisher.wait(publisher.send_encoded(encoded[:2], 1_764_000_000_456))  # tags go on
    publisher.close()

    received = drain(queue)
    assert len(received) == 52
    assert [json.loads(m.body)[0][0] for m in received] == list(range(50)) + [0, 1]
    assert json.loads(received[3].body)[1]["k"] == big
    stamps = [m.application_headers["chrono_published_ms"] for m in received]
    assert stamps == [1_764_000_000_123] * 50 + [1_764_000_000_456] * 2
    assert received[0].application_headers["chrono_fire_ms"] == 1_764_000_000_000
    assert received[0].application_headers["task"] == "chrono.echo"
    assert received[0].properties["delivery_mode"] == 2


def test_a_payload_near_the_limit_is_published_with_its_repr_shortened(queue):
    """Celery's headers repeat the args and kwargs as text (argsrepr, kwargsrepr); whole, a
    200 KB payload made a header frame RabbitMQ refused, and the job could never go out."""
    publisher = Publisher(get_config().broker_url, origin="test")
    kwargs = {"k": "x" * 200_000}
    publisher.publish_batch([TaskMessage(task_id=str(uuid.uuid4()), task_name="chrono.echo",
                                         queue=queue, kwargs_json=json.dumps(kwargs))])
    publisher.close()
    (message,) = drain(queue)
    assert json.loads(message.body)[1] == kwargs
    assert len(message.application_headers["kwargsrepr"]) == 1_024

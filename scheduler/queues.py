"""Chrono's dispatch queues as a Celery app declares them, for Chrono's worker and any other.

The beat publishes every due job to the ``chrono.dispatch`` direct exchange, routed by queue name
to a durable quorum queue (:func:`scheduler.dispatch.declare_queue`). A worker that consumes such a
queue must declare it with the very same arguments, or RabbitMQ refuses the second declaration
(``PRECONDITION_FAILED - inequivalent arg 'x-queue-type'``). This module holds that declaration
without creating a Celery app, so an existing app can import it into its own configuration::

    app.conf.task_queues = [chrono_queue("billing")]
"""

from __future__ import annotations

from kombu import Exchange, Queue

from scheduler.dispatch import DISPATCH_EXCHANGE, QUEUE_ARGUMENTS

dispatch_exchange = Exchange(DISPATCH_EXCHANGE, type="direct", durable=True)


def chrono_queue(name: str) -> Queue:
    """The queue ``name`` declared exactly as the beat declares it."""
    return Queue(
        name,
        dispatch_exchange,
        routing_key=name,
        durable=True,
        queue_arguments=dict(QUEUE_ARGUMENTS),
    )

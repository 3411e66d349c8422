"""The message bus: one topic exchange of CloudEvents, a queue per service, handlers that return events.

Two implementations with the same semantics: :mod:`shared.bus.amqp` (RabbitMQ through aio-pika) and
:mod:`shared.bus.memory` (in-process, for ``paiq up`` without a broker and for unit tests).
"""

from shared.bus.base import Bus, Router

__all__ = ["Bus", "Router"]

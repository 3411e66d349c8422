# RabbitMQ from Debian's package, standing in for the official `rabbitmq:*-management` image in the
# compose test (no registry is reachable here). Same contract as the official image: AMQP on 5672,
# management on 15672, data in /var/lib/rabbitmq, the first user from RABBITMQ_DEFAULT_USER /
# RABBITMQ_DEFAULT_PASS (read by RabbitMQ itself since 3.9), runs as the rabbitmq user.
ARG BASE_IMAGE=paiq/debian-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server \
 && rm -rf /var/lib/apt/lists/* \
 && rabbitmq-plugins enable --offline rabbitmq_management >/dev/null \
 && chown -R rabbitmq:rabbitmq /etc/rabbitmq /var/lib/rabbitmq /var/log/rabbitmq
ENV HOME=/var/lib/rabbitmq \
    RABBITMQ_LOGS=- \
    PATH=/usr/lib/rabbitmq/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER rabbitmq
VOLUME /var/lib/rabbitmq
EXPOSE 5672 15672
HEALTHCHECK --interval=5s --timeout=10s --start-period=30s --retries=5 CMD ["rabbitmq-diagnostics", "-q", "check_port_connectivity"]
CMD ["rabbitmq-server"]

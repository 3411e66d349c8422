# A task image like OpenPAI's own (which had openssh-server): sshd and the ssh client, nothing started.
# paiq starts sshd on the task's ssh port itself (services/launcher/container/sshsetup.py).
ARG BASE_IMAGE=paiq/debian-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server openssh-client \
 && rm -rf /var/lib/apt/lists/*

"""An image the engine would refuse ("invalid reference format") is refused at submit, naming the rule."""

from __future__ import annotations

import pytest

from shared.admission.validation import Accepted, Rejected, validate_job_config
from tests.unit.factories import config_dict

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("image", [
    "busybox", "local/busybox:latest", "127.0.0.1:5000/paiq/busybox:1", "localhost/x", "localhost:5000/a/b:c",
    "tensorflow/tensorflow:1.12.0-gpu-py3", "sitonholy/tensorflow:16.04-9.0-3.5-1.8.0",
    "your_docker_registry/pai.run.tensorflow", "registry.example.com/team/name__x:v1.2",
    "docker.io/library/ubuntu@sha256:" + "0a" * 32,
])
def test_docker_references_are_accepted(image: str) -> None:
    assert isinstance(validate_job_config(config_dict(image=image)), Accepted)


@pytest.mark.parametrize("image", ["Foo:bar", "UPPER/x", "registry.example.com/Team/x", "foo bar", "a..b", "x:",
                                   "-x", "x/", "x@sha256:abc", "x:" + "t" * 129])
def test_references_docker_would_refuse_are_refused(image: str) -> None:
    result = validate_job_config(config_dict(image=image))
    assert isinstance(result, Rejected)
    assert result.problems[0].path == "image" and "must be a Docker image reference" in result.problems[0].rule

"""paiq's docker-compose stack, brought up for real with Debian's docker-compose and the test override.

The images come from tests/deploy/build-images.sh (no registry is reachable here); the stack gets a
project name, ports, passwords and a default file system of its own, so it never meets another run.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from cryptography.fernet import Fernet
from docker.models.containers import Container

from shared.db.embedded import free_port
from tests.infra import unique

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILES = (REPO / "docker-compose.yml", REPO / "tests" / "deploy" / "docker-compose.test.yml")
BUILD_IMAGES = REPO / "tests" / "deploy" / "build-images.sh"
SERVICES = ("rabbitmq", "mongodb", "submit", "scheduler", "status", "launcher", "notify")
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"


def build_images(limit_s: float = 1200) -> float:
    """Run build-images.sh (a no-op when every image is current); its duration in seconds."""
    started = time.monotonic()
    done = subprocess.run(["bash", str(BUILD_IMAGES)], capture_output=True, text=True, timeout=limit_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"build-images.sh failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return time.monotonic() - started


def stack_settings(fs_dir: Path) -> dict[str, str]:
    """The env file of one test stack: fresh passwords, free host ports, its own node and file system."""
    return {
        "RABBITMQ_DEFAULT_USER": "paiq",
        "RABBITMQ_DEFAULT_PASS": secrets.token_hex(16),
        "MONGO_INITDB_ROOT_USERNAME": "paiq",
        "MONGO_INITDB_ROOT_PASSWORD": secrets.token_hex(16),
        "PAIQ_ADMIN_USER": "admin",
        "PAIQ_ADMIN_PASSWORD": secrets.token_hex(16),
        "PAIQ_SECRETS_KEY": Fernet.generate_key().decode(),
        "API_HOST_PORT": str(free_port()),
        "RABBITMQ_HOST_PORT": str(free_port()),
        "RABBITMQ_MANAGEMENT_HOST_PORT": str(free_port()),
        "MONGODB_HOST_PORT": str(free_port()),
        "LAUNCHER_OPS_HOST_PORT": str(free_port()),
        "SCHEDULER_OPS_HOST_PORT": str(free_port()),
        "STATUS_OPS_HOST_PORT": str(free_port()),
        "HOST_FS_DIR": str(fs_dir),
        "PAIQ_NODE_ID": unique("compose-"),
        "PAIQ_NODE_CPUS": "8",
        "PAIQ_NODE_MEMORY_MB": "8192",
        "PAIQ_NODE_PORT_RANGE": "29000-29099",
        "PAIQ_RECONCILE_SECONDS": "2",
        "PAIQ_STOP_GRACE_SECONDS": "2",
        "PAIQ_LOG_LEVEL": "debug",
    }


@dataclass
class ComposeStack:
    project: str
    workdir: Path
    settings: dict[str, str]
    client: docker.DockerClient
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env_file(self) -> Path:
        return self.workdir / "paiq.env"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.settings['API_HOST_PORT']}"

    @property
    def node_id(self) -> str:
        return self.settings["PAIQ_NODE_ID"]

    def compose(self, *args: str, limit_s: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """docker-compose with both files and the env file; the caller's shell cannot leak settings in."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PAIQ_", "COMPOSE_")) and k not in self.settings}
        cmd = ["docker-compose", "--ansi", "never", "-p", self.project, "--project-directory", str(REPO),
               *(arg for f in COMPOSE_FILES for arg in ("-f", str(f))), "--env-file", str(self.env_file), *args]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=limit_s, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[-len(args):])} failed ({done.returncode}):\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{self.logs()}")
        return done

    def up(self, limit_s: float = 240) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path(self.settings["HOST_FS_DIR"]).mkdir(parents=True, exist_ok=True)
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        self.env_file.chmod(0o600)
        started = time.monotonic()
        self.compose("up", "-d", "--no-build", limit_s=limit_s)
        self.wait_healthy(limit_s)
        self.timings["up"] = time.monotonic() - started

    def containers(self) -> dict[str, Container]:
        found = self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})
        return {c.labels[SERVICE_LABEL]: c for c in found}

    def health(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, c in self.containers().items():
            c.reload()
            state = c.attrs["State"]
            health = (state.get("Health") or {}).get("Status")
            out[name] = health if state["Running"] and health else state["Status"]
        return out

    def wait_healthy(self, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        health: dict[str, str] = {}
        while time.monotonic() < deadline:
            health = self.health()
            if sorted(health) == sorted(SERVICES) and set(health.values()) == {"healthy"}:
                return
            time.sleep(1)
        raise RuntimeError(f"the stack was not healthy within {limit_s}s: {health}\n{self.logs()}")

    def logs(self) -> str:
        done = self.compose("logs", "--no-color", "--tail", "60", check=False)
        return done.stdout[-12000:]

    def leftovers(self) -> dict[str, list[str]]:
        """What of this stack exists on the engine: its containers, networks, volumes and task containers."""
        label = {"label": f"{PROJECT_LABEL}={self.project}"}
        return {
            "containers": [str(c.name) for c in self.client.containers.list(all=True, filters=label)],
            "networks": [str(n.name) for n in self.client.networks.list(filters=label)],
            "volumes": [str(v.name) for v in self.client.volumes.list(filters=label)],
            "tasks": [str(c.name) for c in self.client.containers.list(
                all=True, filters={"label": f"paiq.node={self.node_id}"})],
        }

    def down(self) -> None:
        started = time.monotonic()
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10")
        self.timings["down"] = time.monotonic() - started

    def force_cleanup(self) -> None:
        """After a failure: no task container, project container, network or volume may outlive the test."""
        self.compose("down", "-v", "--remove-orphans", "--timeout", "5", check=False)
        for c in self.client.containers.list(all=True, filters={"label": f"paiq.node={self.node_id}"}):
            c.remove(force=True)

"""Herald as a separate process, exactly as users run it (`python -m herald run --config F`).

Tests drive it with real, blocking Kafka clients; running the proxy in its own process keeps
those clients from stalling its event loop and exercises the real CLI, config file and signals.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from proxy.devtools.embedded_kafka import free_port_block
from tests.support.processes import stop as stop_process

REPO = Path(__file__).resolve().parents[2]


def herald_config(upstream: str, **overrides: Any) -> dict[str, Any]:
    """A config dict for a Herald on free loopback ports in front of `upstream`."""
    base = free_port_block()
    config: dict[str, Any] = {
        "upstream": {"bootstrap": upstream},
        "listen": {
            "bootstrap": f"127.0.0.1:{base}",
            "advertised_host": "127.0.0.1",
            "broker_port_base": base,
        },
        "logging": {"level": "info"},
        "shutdown": {"grace_s": 5},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    return config


def shipped_config(upstream: str) -> dict[str, Any]:
    """proxy.yaml as `herald dev` runs it, its upstream replaced by `upstream`, on free
    loopback ports instead of its fixed ones (tests run side by side)."""
    config = yaml.safe_load((REPO / "proxy.yaml").read_text())
    free = herald_config(upstream)
    config["upstream"]["bootstrap"] = upstream
    config["listen"].update(free["listen"])
    config["admin"]["bind"] = f"127.0.0.1:{free['listen']['broker_port_base'] + 15}"
    return config


class HeraldProcess:
    def __init__(self, config: dict[str, Any], env: dict[str, str] | None = None,
                 nofile: tuple[int, int] | None = None) -> None:
        """`env`: extra environment variables for the process (e.g. OTEL_*); `nofile`: the
        (soft, hard) open-files limit it starts with."""
        self.config = config
        self.env = dict(env or {})
        self.nofile = nofile
        self.folder = Path(tempfile.mkdtemp(prefix="herald-test-"))
        self.config_path = self.folder / "proxy.yaml"
        self.log_path = self.folder / "herald.log"
        self.process: subprocess.Popen | None = None
        self.ready_line: str | None = None

    @property
    def bootstrap(self) -> str:
        return self.config["listen"]["bootstrap"]

    @property
    def port_base(self) -> int:
        return self.config["listen"]["broker_port_base"]

    @property
    def admin_url(self) -> str:
        """http://HOST:PORT of the admin endpoint (`admin.bind` must be in the config)."""
        return f"http://{self.config['admin']['bind']}"

    def start(self, timeout: float = 60.0) -> HeraldProcess:
        self.config_path.write_text(yaml.safe_dump(self.config))
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        runtime = os.environ.get("HERALD_SANITIZER_RUNTIME")
        if runtime:  # scripts/sanitize.sh: the extensions Herald loads need the ASan runtime
            env["LD_PRELOAD"] = runtime
        # A checkout from before the `herald` package (bench_cost compares against one) ran
        # as `python -m proxy`.
        command = "herald" if (REPO / "herald" / "__main__.py").is_file() else "proxy"
        self.process = subprocess.Popen(
            [sys.executable, "-m", command, "run", "--config", str(self.config_path)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
            preexec_fn=None if self.nofile is None else self._limit_descriptors,
        )
        log.close()
        lines: list[str] = []
        reader = threading.Thread(target=self._read_stdout, args=(lines,), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith("herald ready:") for line in lines):
                self.ready_line = next(x for x in lines if x.startswith("herald ready:"))
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"herald did not become ready:\n{self.logs()}")

    def _limit_descriptors(self) -> None:
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def open_fds(self) -> set[int]:
        """The descriptors the process holds now."""
        assert self.process is not None
        return {int(fd) for fd in os.listdir(f"/proc/{self.process.pid}/fd")}

    def _read_stdout(self, lines: list[str]) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            lines.append(raw.decode(errors="replace").rstrip("\n"))
        self.stdout_lines = lines

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 15) -> None:
        """Until `text` is in the log (a signal's effect, a reload): fails with the log."""
        deadline = time.monotonic() + timeout
        while text not in self.logs():
            assert time.monotonic() < deadline, f"no {text} in the log:\n{self.logs()}"
            time.sleep(0.05)

    def memory(self, field: str = "VmRSS") -> int:
        """Bytes of a memory figure of the process from /proc (VmRSS now, VmHWM peak)."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
        raise ValueError(f"no {field} in /proc/{self.process.pid}/status")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 20)

    def __enter__(self) -> HeraldProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

"""A Spark standalone cluster (one master, `workers` workers) started from the PySpark
distribution's own launcher (`bin/spark-class`), on loopback ports the OS picked."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config import PipelineConfig
from pipeline.session import jvm_opts
from proxy.devtools.embedded_kafka import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    def __init__(self, worker_cores: int = 2, worker_memory: str = "2g", workers: int = 1
                 ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="spark-standalone-"))
        self.port = free_port()
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.workers = workers
        self.processes: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"{name}.log"
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_NO_DAEMONIZE="1", SPARK_DAEMON_JAVA_OPTS=jvm_opts())
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.processes.append(proc)
        return proc, log

    def _wait_for(self, log: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"{log.name}: no '{text}':\n{log.read_text(errors='replace')[-3000:]}")

    def start(self) -> SparkStandalone:
        try:
            master, mlog = self._start(
                "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(free_port()))
            self._wait_for(mlog, "I have been elected leader", master, 120)
            for n in range(self.workers):
                worker, wlog = self._start(
                    f"worker-{n}", "org.apache.spark.deploy.worker.Worker", "--host",
                    "127.0.0.1", "--cores", str(self.worker_cores), "--memory",
                    self.worker_memory, "--webui-port", str(free_port()), "--work-dir",
                    str(self.folder / "work" / f"worker-{n}"), self.master_url)
                self._wait_for(wlog, "Successfully registered with master", worker, 120)
        except BaseException:
            self.stop()
            raise
        return self

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.folder.glob("*.log")))

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        self.processes.clear()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def pipeline_command(job: str, master: str, config: PipelineConfig, output: str,
                     *more: str) -> list[str]:
    """`herald pipeline <job>` (batch or stream) submitted to `master` with `config`'s
    sources and settings, writing to `output`; `more` are the job's own flags."""
    return [sys.executable, "-m", "herald", "pipeline", job,
            "--master", master, "--driver-memory", "768m",
            "--bootstrap", config.bootstrap, "--topics", ",".join(config.topics),
            "--terminal-topics", ",".join(config.terminal_topics),
            "--max-wait-ms", str(config.max_wait_ms), "--fetch-topic", config.fetch_topic,
            "--time-bucket-s", str(config.time_bucket_s),
            "--inference-scope", config.inference_scope, "--output", output, *more]

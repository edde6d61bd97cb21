"""Herald's whole memory as a sidecar: resident set idle, under one pod's traffic, and with its
link memory full, with the configuration the injector writes (`proxy.k8s.sidecar.proxy_config`:
`trace_context` with `link` scoped by host, `audit`, no fetch chain of its own).

    python bench/bench_sidecar_footprint.py [--rate 1000] [--seconds 30] [--consume-mb-s 5]
                                            [--capacity N] [--data-dir DIR]

One broker and one Herald in front of it; with two CPUs, the broker and the clients on CPU 0 and
Herald on CPU 1 (bench/pinning.py). Herald's VmRSS (/proc/PID/status) is read:

1. **idle**: after start, once a producer and a consumer have connected (ApiVersions,
   Metadata) and sent nothing;
2. **load**: a producer at `--rate` records/s of 1 KiB through Herald, every record with a
   trace of its own (Herald links what the pod fetched to what it writes, so a new trace per
   record is what fills the link memory fastest), and a consumer reading them back through
   Herald, for `--seconds`: RSS each second, the highest and the last, and the link memory's
   entries (`herald_interceptor_level{level="link_memory_entries"}`) at the end;
3. **full**: records with traces of their own, written straight to the broker and read through
   Herald, until the link memory holds `--capacity` entries and as many more have been
   evicted (their keys fill its bounded set of dropped keys): RSS then.

The links' memory is the one the injector sizes for a pod declared at `--consume-mb-s`
(`proxy.k8s.sizing.link_capacity`); `--capacity` replaces it. Prints one JSON
line; the figures are Herald's alone, the clients' and the broker's are not in them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer  # noqa: E402

from bench.bench_idle_connections import create_topics, rss_bytes  # noqa: E402
from bench.bench_proxy import data_dir, log  # noqa: E402
from bench.pinning import PROXY_CPU, can_pin, pin, pin_self_to_load_cpu  # noqa: E402
from interceptors.trace_links import LinkConfig  # noqa: E402
from proxy.devtools.embedded_kafka import KafkaCluster, free_port  # noqa: E402
from proxy.k8s.sidecar import SidecarSpec, proxy_config  # noqa: E402
from proxy.k8s.sizing import Throughput  # noqa: E402
from tests.support.herald_process import HeraldProcess, herald_config  # noqa: E402

MIB = 1024 * 1024
# What the pod's downward API gives the sidecar (its instance id is made of them).
POD = {"POD_NAME": "bench-pod-0", "POD_NAMESPACE": "bench", "NODE_NAME": "bench-node"}
VALUE = b"x" * 1024
_ENTRIES = re.compile(r'^herald_interceptor_level\{[^}]*level="link_memory_entries"[^}]*\} '
                      r'([0-9.e+]+)$', re.M)


def sidecar_config(upstream: str, consume_mb_s: float, capacity: int | None) -> dict:
    """The injector's proxy.yaml for a pod declared at `consume_mb_s`, on free loopback ports
    (the sidecar's own are fixed); `capacity`, when given, replaces the link capacity the
    injector sized."""
    config = proxy_config(SidecarSpec(upstream=upstream,
                                      load=Throughput(consume_mb_s=consume_mb_s)))
    free = herald_config(upstream)
    config["listen"].update(free["listen"])
    config["admin"]["bind"] = f"127.0.0.1:{free_port()}"
    if capacity is not None:
        (trace,) = [m for m in config["interceptors"]["produce"]
                    if m["type"] == "trace_context"]
        trace["link"]["capacity"] = capacity
    return config


def capacity_of(config: dict) -> int:
    (trace,) = [m for m in config["interceptors"]["produce"] if m["type"] == "trace_context"]
    return int(trace["link"].get("capacity", LinkConfig().capacity))


def link_entries(admin_url: str) -> int:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return int(sum(float(v) for v in _ENTRIES.findall(text)))


def traceparent() -> bytes:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01".encode()


def _consumer(bootstrap: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pod-{uuid.uuid4().hex[:6]}",
                  "client.id": "pod-app", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.subscribe([topic])
    return c


def _drain(consumer: Consumer, stop: threading.Event, counted: list[int]) -> None:
    while not stop.is_set():
        for msg in consumer.consume(500, 0.2):
            if not msg.error():
                counted[0] += 1


def measure(args: argparse.Namespace, workdir: Path, pinned: bool) -> dict:
    with KafkaCluster(size=1, workdir=workdir) as cluster:
        tag = uuid.uuid4().hex[:6]
        load_topic, fill_topic = f"pod-load-{tag}", f"pod-fill-{tag}"
        create_topics(cluster.bootstrap, [load_topic, fill_topic])
        config = sidecar_config(cluster.bootstrap, args.consume_mb_s, args.capacity)
        capacity = capacity_of(config)
        with HeraldProcess(config, env=POD) as herald:
            assert herald.process is not None
            pid = herald.process.pid
            if pinned:
                pin(pid, {PROXY_CPU})
            # 1. idle: a producer and a consumer connected, nothing sent.
            producer = Producer({"bootstrap.servers": herald.bootstrap, "client.id": "pod-app",
                                 "linger.ms": 5})
            producer.list_topics(timeout=30)
            consumer = _consumer(herald.bootstrap, load_topic)
            consumer.consume(1, 3.0)
            time.sleep(2)
            idle = rss_bytes(pid)
            # 2. load: --rate records/s through Herald, read back through Herald.
            stop, got = threading.Event(), [0]
            reader = threading.Thread(target=_drain, args=(consumer, stop, got), daemon=True)
            reader.start()
            samples, sent = [], 0
            start = time.monotonic()
            next_sample = start + 1
            while (now := time.monotonic()) - start < args.seconds:
                due = int((now - start) * args.rate)
                while sent < due:
                    producer.produce(load_topic, VALUE, headers=[("traceparent", traceparent())])
                    sent += 1
                producer.poll(0)
                if now >= next_sample:
                    samples.append(rss_bytes(pid))
                    next_sample += 1
                time.sleep(0.002)
            assert producer.flush(30) == 0
            time.sleep(2)
            stop.set()
            reader.join(10)
            consumer.close()
            load = {"rate": args.rate, "seconds": args.seconds, "sent": sent,
                    "read": got[0], "rss_max_mib": max(samples) / MIB,
                    "rss_end_mib": rss_bytes(pid) / MIB,
                    "link_entries": link_entries(herald.admin_url)}
            log(f"load: {load}")
            # 3. full: capacity entries held and as many evicted.
            direct = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20,
                               "batch.size": 1_000_000})
            total = 2 * capacity
            for i in range(total):
                direct.produce(fill_topic, b"f", headers=[("traceparent", traceparent())])
                if i % 10_000 == 0:
                    direct.poll(0)
            assert direct.flush(60) == 0
            filler = _consumer(herald.bootstrap, fill_topic)
            read, deadline = 0, time.monotonic() + 600
            while read < total and time.monotonic() < deadline:
                read += sum(1 for m in filler.consume(10_000, 1.0) if not m.error())
            filler.close()
            time.sleep(2)
            full = {"records": read, "link_entries": link_entries(herald.admin_url),
                    "rss_mib": rss_bytes(pid) / MIB}
            log(f"full: {full}")
            return {"config": "sidecar (proxy.k8s.sidecar.proxy_config)",
                    "consume_mb_s": args.consume_mb_s, "link_capacity": capacity,
                    "pinned": pinned,
                    "idle_rss_mib": idle / MIB, "load": load, "full": full}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="records/s (default 1000)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--consume-mb-s", type=float, default=Throughput().consume_mb_s,
                        help="the pod's declared consume rate, from which the injector sizes "
                             "the links' memory (default: the injector's default)")
    parser.add_argument("--capacity", type=int, default=None,
                        help="link.capacity of the run instead of the injector's sizing")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    pinned = can_pin()
    if pinned:
        pin_self_to_load_cpu()
    with data_dir(args.data_dir, 4 * 1024 * MIB) as workdir:
        result = measure(args, workdir, pinned)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

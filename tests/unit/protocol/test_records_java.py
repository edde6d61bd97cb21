"""Differential tests against Kafka's own Java record code (kafka-clients).

Both directions, for every codec: batches we encode (fresh, header-spliced, filtered) must pass
Java's `ensureValid()` and read back as intended; batches Java's `MemoryRecordsBuilder` writes
must parse identically here, and survive our header edits. One JVM writes, one JVM reads: the
module fixture batches all files so the whole file costs two JVM starts.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from protocol.records import Record, RecordBatch, build_batch, split_batches

CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
KAFKA_VERSION = "4.3.1"
SOURCE = Path(__file__).parent / "java" / "RecordCheck.java"
CHECKOUT = Path(__file__).resolve().parents[3]
BASE_TS = 1_700_000_000_000


def kafka_jars() -> Path:
    """The folder of Kafka's runtime jars (fetched with Maven and cached on first use)."""
    from proxy.devtools.kafka_dist import kafka_libs

    return Path(kafka_libs(KAFKA_VERSION))


def record_package(libs: Path) -> str:
    # Kafka 4.3 moved the record classes to an `internal` sub-package.
    with zipfile.ZipFile(libs / f"kafka-clients-{KAFKA_VERSION}.jar") as jar:
        names = set(jar.namelist())
    if "org/apache/kafka/common/record/internal/MemoryRecords.class" in names:
        return "org.apache.kafka.common.record.internal"
    return "org.apache.kafka.common.record"


@dataclass
class Java:
    libs: Path
    classes: Path

    def run(self, *args: str) -> dict[str, list[str]]:
        cp = f"{self.classes}:{self.libs}/*"
        cmd = ["java", "-XX:TieredStopAtLevel=1", "-Xmx512m", "-cp", cp, "RecordCheck", *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        files: dict[str, list[str]] = {}
        current: list[str] = []
        for line in result.stdout.splitlines():
            if line.startswith("FILE "):
                current = files.setdefault(Path(line[5:]).name, [])
            else:
                current.append(line)
        return files


def compile_checker() -> Java:
    libs = kafka_jars()
    source = SOURCE.read_text().replace("@RECORD_PACKAGE@", record_package(libs))
    digest = hashlib.sha256(f"{source}{libs}".encode()).hexdigest()[:16]
    classes = CHECKOUT / ".cache" / "record-check" / digest
    if not (classes / "RecordCheck.class").exists():
        # Compile beside the final folder and rename: concurrent runs never see half a build.
        classes.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"tmp-{digest}-", dir=classes.parent))
        (work / "RecordCheck.java").write_text(source)
        subprocess.run(
            [
                "javac",
                "-nowarn",
                "-cp",
                f"{libs}/*",
                "-d",
                str(work),
                str(work / "RecordCheck.java"),
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
        try:
            work.rename(classes)
        except OSError:
            shutil.rmtree(work, ignore_errors=True)  # another run finished first
    return Java(libs, classes)


# --- what a batch should look like, in the checker's output format --------------------------


def hx(data: bytes | None) -> str:
    return "-" if data is None else "x" + data.hex()


def batch_line(batch: RecordBatch, count: int, codec: int) -> str:
    return (
        f"B {batch.base_offset} {batch.base_offset + batch.last_offset_delta} {count} {codec} "
        f"{batch.producer_id} {batch.producer_epoch} {batch.base_sequence} "
        f"{str(batch.is_transactional).lower()} {str(batch.is_control).lower()} "
        f"{batch.timestamp_type} {batch.max_timestamp} {batch.partition_leader_epoch}"
    )


def record_line(base_offset: int, base_ts: int, rec: Record) -> str:
    fields = [
        "R",
        str(base_offset + rec.offset_delta),
        str(base_ts + rec.timestamp_delta),
        hx(rec.key),
        hx(rec.value),
        str(len(rec.headers)),
    ]
    for key, value in rec.headers:
        fields += [hx(key.encode()), hx(value)]
    return " ".join(fields)


def describe(data: bytes) -> list[str]:
    """Our parser's view of `data`, in the checker's format."""
    lines = []
    for batch in split_batches(data):
        assert isinstance(batch, RecordBatch)
        lines.append(batch_line(batch, batch.record_count, batch.compression))
        lines += [record_line(batch.base_offset, batch.base_timestamp, r) for r in batch.records]
    return lines


def sample_records() -> list[Record]:
    records = []
    for i in range(30):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        if i % 9 == 4:
            value = None
        elif i == 12:
            value = bytes((j * 31 ^ j >> 7) & 0xFF for j in range(150_000))  # several blocks
        elif i == 13:
            value = b""
        else:
            value = f"value {i} ".encode() + b"lorem ipsum " * i
        headers = [
            ("traceparent", f"00-{i:032x}-{i:016x}-01".encode()),
            ("dup", b"\x01\x02"),
            ("dup", None),
            ("ключ-é", b""),
        ][: i % 5]
        records.append(Record(key, value, headers, timestamp_delta=i * 3))
    return records


def build_sample(codec: int) -> bytes:
    return build_batch(
        sample_records(),
        compression=codec,
        base_offset=500,
        base_timestamp=BASE_TS,
        partition_leader_epoch=4,
        producer_id=9001,
        producer_epoch=2,
        base_sequence=17,
        is_transactional=True,
    )


def edit_headers(batch: RecordBatch) -> None:
    """Header work an interceptor chain might do: append, drop, replace."""
    for i, rec in enumerate(batch.records):
        if i % 3 == 0:
            rec.headers.append(("herald.audit", f"hop-{i}".encode()))
            rec.headers.append(("herald.none", None))
        elif i % 3 == 1:
            rec.headers = [(k, v) for k, v in rec.headers if k != "dup"]
        # i % 3 == 2: untouched, copied as original bytes


def expected_after(data: bytes, change) -> list[str]:
    """Independent expectation: apply `change` to plain copies, describe without our splice."""
    lines = []
    for batch in split_batches(data):
        records = [
            Record(
                r.key,
                r.value,
                list(r.headers),
                timestamp_delta=r.timestamp_delta,
                offset_delta=r.offset_delta,
            )
            for r in batch.records
        ]
        kept = change(records)
        codec = batch.compression if kept else NONE
        lines.append(batch_line(batch, len(kept), codec))
        lines += [record_line(batch.base_offset, batch.base_timestamp, r) for r in kept]
    return lines


def as_edited(records: list[Record]) -> list[Record]:
    for i, rec in enumerate(records):
        if i % 3 == 0:
            rec.headers = rec.headers + [
                ("herald.audit", f"hop-{i}".encode()),
                ("herald.none", None),
            ]
        elif i % 3 == 1:
            rec.headers = [(k, v) for k, v in rec.headers if k != "dup"]
    return records


def odd_offsets_removed(records: list[Record]) -> list[Record]:
    return [r for r in records if r.offset_delta % 2 == 0]


@pytest.fixture(scope="module")
def java_results(tmp_path_factory) -> dict:
    java = compile_checker()
    out = tmp_path_factory.mktemp("records-java")
    from_java = java.run("write", str(out))
    expected: dict[str, list[str]] = {}
    for name, codec in CODECS.items():
        data = build_sample(codec)
        (out / f"py-{name}.bin").write_bytes(data)
        expected[f"py-{name}.bin"] = expected_after(data, lambda rs: rs)

        batch = split_batches(data)[0]
        edit_headers(batch)
        (out / f"py-{name}-edited.bin").write_bytes(batch.to_bytes())
        expected[f"py-{name}-edited.bin"] = expected_after(data, as_edited)

        batch = split_batches(data)[0]
        batch.remove_records(lambda r: r.offset_delta % 2 == 1)
        (out / f"py-{name}-filtered.bin").write_bytes(batch.to_bytes())
        expected[f"py-{name}-filtered.bin"] = expected_after(data, odd_offsets_removed)

        batch = split_batches(data)[0]
        batch.remove_records(lambda r: True)
        (out / f"py-{name}-emptied.bin").write_bytes(batch.to_bytes())
        expected[f"py-{name}-emptied.bin"] = expected_after(data, lambda rs: [])

        java_data = (out / f"java-{name}.bin").read_bytes()
        batch = split_batches(java_data)[0]
        edit_headers(batch)
        (out / f"java-{name}-edited.bin").write_bytes(batch.to_bytes())
        expected[f"java-{name}-edited.bin"] = expected_after(java_data, as_edited)
    from_python = java.run("read", *sorted(str(p) for p in out.glob("*.bin") if p.name in expected))
    return {"dir": out, "from_java": from_java, "java_reads": from_python, "expected": expected}


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("variant", ["", "-edited", "-filtered", "-emptied"])
def test_java_reads_our_batches(java_results, codec, variant):
    name = f"py-{codec}{variant}.bin"
    assert java_results["java_reads"][name] == java_results["expected"][name]


@pytest.mark.parametrize("codec", list(CODECS))
def test_we_read_java_batches(java_results, codec):
    data = (java_results["dir"] / f"java-{codec}.bin").read_bytes()
    java_view = java_results["from_java"][f"java-{codec}.bin"]
    assert not any(line.startswith("ERR") for line in java_view)
    assert describe(data) == java_view
    batch = split_batches(data)[0]
    assert batch.compression == CODECS[codec]
    assert batch.crc_is_valid()
    assert batch.to_bytes() == data  # untouched: byte-identical


@pytest.mark.parametrize("codec", list(CODECS))
def test_java_reads_our_edits_of_java_batches(java_results, codec):
    name = f"java-{codec}-edited.bin"
    assert java_results["java_reads"][name] == java_results["expected"][name]


def test_we_read_java_control_batch(java_results):
    data = (java_results["dir"] / "java-control.bin").read_bytes()
    assert describe(data) == java_results["from_java"]["java-control.bin"]
    batch = split_batches(data)[0]
    assert batch.is_control and batch.is_transactional
    # COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 9
    (record,) = batch.records
    assert record.key == b"\x00\x00\x00\x01"
    assert record.value[:6] == b"\x00\x00\x00\x00\x00\x09"

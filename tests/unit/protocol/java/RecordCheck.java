// Reference-implementation check for Herald's record batch codec.
//
//   java RecordCheck read <file>...   parse each file with Kafka's own MemoryRecords, validate
//                                     every batch (CRC included) and print what Java sees
//   java RecordCheck write <dir>      write one batch file per codec with Kafka's own builder,
//                                     plus a transaction marker, then print them like `read`
//
// Output, one line each:
//   FILE <path>
//   B <baseOffset> <lastOffset> <count> <codecId> <producerId> <epoch> <baseSequence>
//     <transactional> <control> <timestampTypeId> <maxTimestamp> <partitionLeaderEpoch>
//   R <offset> <timestamp> <key> <value> <headerCount> [<headerKey> <headerValue>]...
//   ERR <exception>
// Byte strings are printed as "x" + hex ("x" alone is empty), "-" is null; header keys as the
// hex of their UTF-8 bytes.
//
// The record classes moved to ...record.internal in Kafka 4.3; the test substitutes the
// package into the placeholder below before compiling.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import @RECORD_PACKAGE@.ControlRecordType;
import @RECORD_PACKAGE@.EndTransactionMarker;
import @RECORD_PACKAGE@.MemoryRecords;
import @RECORD_PACKAGE@.MemoryRecordsBuilder;
import @RECORD_PACKAGE@.Record;
import @RECORD_PACKAGE@.RecordBatch;

public class RecordCheck {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};

    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        if (args[0].equals("read")) {
            for (int i = 1; i < args.length; i++) {
                print(Paths.get(args[i]), out);
            }
        } else if (args[0].equals("write")) {
            Path dir = Paths.get(args[1]);
            for (String codec : CODECS) {
                Path file = dir.resolve("java-" + codec + ".bin");
                Files.write(file, toBytes(build(codec)));
                print(file, out);
            }
            Path marker = dir.resolve("java-control.bin");
            MemoryRecords control = MemoryRecords.withEndTransactionMarker(
                    42L, 1_700_000_000_500L, 3, 777L, (short) 5,
                    new EndTransactionMarker(ControlRecordType.COMMIT, 9));
            Files.write(marker, toBytes(control));
            print(marker, out);
        } else {
            throw new IllegalArgumentException("usage: read <file>... | write <dir>");
        }
        System.out.print(out);
    }

    static MemoryRecords build(String codec) {
        ByteBuffer buffer = ByteBuffer.allocate(1 << 21);
        MemoryRecordsBuilder builder = MemoryRecords.builder(
                buffer, RecordBatch.MAGIC_VALUE_V2, Compression.of(codec).build(),
                TimestampType.CREATE_TIME, 1000L, RecordBatch.NO_TIMESTAMP,
                4242L, (short) 7, 100, false, 11);
        long base = 1_700_000_000_000L;
        for (int i = 0; i < 40; i++) {
            byte[] key = i % 7 == 3 ? null : ("key-" + i).getBytes(StandardCharsets.UTF_8);
            byte[] value;
            if (i % 11 == 5) {
                value = null;
            } else if (i == 20) {
                value = new byte[200_000];  // spans several lz4 and xerial blocks
                for (int j = 0; j < value.length; j++) {
                    value[j] = (byte) ((j * 31) ^ (j >> 7));
                }
            } else {
                value = ("value " + i + " " + "lorem ipsum ".repeat(i)).getBytes(StandardCharsets.UTF_8);
            }
            Header[] headers = {
                new RecordHeader("traceparent", ("00-" + i).getBytes(StandardCharsets.UTF_8)),
                new RecordHeader("dup", new byte[] {1, 2, 3}),
                new RecordHeader("dup", (byte[]) null),
                new RecordHeader("ключ-é", new byte[0]),
            };
            builder.appendWithOffset(1000L + i, base + i * 5L, key, value,
                    i % 5 == 4 ? Record.EMPTY_HEADERS : headers);
        }
        return builder.build();
    }

    static byte[] toBytes(MemoryRecords records) {
        ByteBuffer buf = records.buffer().duplicate();
        byte[] bytes = new byte[buf.remaining()];
        buf.get(bytes);
        return bytes;
    }

    static void print(Path file, StringBuilder out) {
        out.append("FILE ").append(file).append('\n');
        try {
            MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(Files.readAllBytes(file)));
            for (RecordBatch batch : records.batches()) {
                batch.ensureValid();
                out.append("B ").append(batch.baseOffset()).append(' ').append(batch.lastOffset())
                        .append(' ').append(batch.countOrNull())
                        .append(' ').append(batch.compressionType().id)
                        .append(' ').append(batch.producerId())
                        .append(' ').append(batch.producerEpoch())
                        .append(' ').append(batch.baseSequence())
                        .append(' ').append(batch.isTransactional())
                        .append(' ').append(batch.isControlBatch())
                        .append(' ').append(batch.timestampType().id)
                        .append(' ').append(batch.maxTimestamp())
                        .append(' ').append(batch.partitionLeaderEpoch()).append('\n');
                for (Record record : batch) {
                    record.ensureValid();
                    out.append("R ").append(record.offset()).append(' ').append(record.timestamp())
                            .append(' ').append(hex(record.key()))
                            .append(' ').append(hex(record.value()))
                            .append(' ').append(record.headers().length);
                    for (Header h : record.headers()) {
                        out.append(' ').append(hex(h.key().getBytes(StandardCharsets.UTF_8)))
                                .append(' ').append(hex(h.value()));
                    }
                    out.append('\n');
                }
            }
        } catch (Exception e) {
            out.append("ERR ").append(e.toString().replace('\n', ' ')).append('\n');
        }
    }

    static String hex(ByteBuffer buf) {
        if (buf == null) {
            return "-";
        }
        byte[] bytes = new byte[buf.remaining()];
        buf.duplicate().get(bytes);
        return hex(bytes);
    }

    static String hex(byte[] bytes) {
        if (bytes == null) {
            return "-";
        }
        StringBuilder sb = new StringBuilder("x");
        for (byte b : bytes) {
            sb.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        return sb.toString();
    }
}

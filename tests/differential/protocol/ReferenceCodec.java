// The reference side of Herald's differential codec test: Apache Kafka's own generated message
// classes, driven over stdin/stdout so that one JVM serves a whole test session.
//
// Input: one JSON request per line; output: one JSON reply per line.
//   {"op": "encode", "message": "MetadataResponse", "version": 13, "json": {...}}
//       -> {"hex": "..."}              JsonConverter.read, then Message.write
//   {"op": "decode", "message": "MetadataResponse", "version": 13, "hex": "..."}
//       -> {"json": {...}, "hex": "...", "remaining": 0}
//                                      read from bytes, JsonConverter.write, and write again
//   {"op": "headers", "keys": [0, 1, ...], "maxVersion": 20}
//       -> {"versions": [[apiKey, version, requestHeaderVersion, responseHeaderVersion], ...]}
// Any failure -> {"error": "..."}.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;

public final class ReferenceCodec {
    private static final String PACKAGE = "org.apache.kafka.common.message.";
    private static final ObjectMapper MAPPER = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            ObjectNode reply = MAPPER.createObjectNode();
            try {
                handle(MAPPER.readTree(line), reply);
            } catch (Throwable t) {
                Throwable cause = t instanceof InvocationTargetException ? t.getCause() : t;
                reply.removeAll();
                reply.put("error", String.valueOf(cause));
            }
            out.println(MAPPER.writeValueAsString(reply));
            out.flush();
        }
    }

    private static void handle(JsonNode request, ObjectNode reply) throws Exception {
        String op = request.get("op").asText();
        if (op.equals("headers")) {
            headers(request, reply);
            return;
        }
        String name = request.get("message").asText();
        short version = (short) request.get("version").asInt();
        Class<?> data = Class.forName(PACKAGE + name + "Data");
        Class<?> converter = Class.forName(PACKAGE + name + "DataJsonConverter");
        if (op.equals("encode")) {
            Method read = converter.getMethod("read", JsonNode.class, short.class);
            Message message = (Message) read.invoke(null, request.get("json"), version);
            reply.put("hex", hex(serialize(message, version)));
        } else if (op.equals("decode")) {
            ByteBuffer buffer = ByteBuffer.wrap(unhex(request.get("hex").asText()));
            Message message = (Message) data.getConstructor(Readable.class, short.class)
                .newInstance(new ByteBufferAccessor(buffer), version);
            Method write = converter.getMethod("write", data, short.class);
            reply.set("json", (JsonNode) write.invoke(null, message, version));
            reply.put("hex", hex(serialize(message, version)));
            reply.put("remaining", buffer.remaining());
        } else {
            throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static void headers(JsonNode request, ObjectNode reply) {
        ArrayNode rows = reply.putArray("versions");
        int maxVersion = request.get("maxVersion").asInt();
        for (JsonNode key : request.get("keys")) {
            ApiMessageType type;
            try {
                type = ApiMessageType.fromApiKey((short) key.asInt());
            } catch (RuntimeException e) {
                continue;
            }
            for (short v = 0; v <= maxVersion; v++) {
                short requestVersion;
                short responseVersion;
                try {
                    requestVersion = type.requestHeaderVersion(v);
                    responseVersion = type.responseHeaderVersion(v);
                } catch (RuntimeException e) {
                    continue; // a version this release does not know
                }
                ArrayNode row = rows.addArray();
                row.add(key.asInt()).add(v).add(requestVersion).add(responseVersion);
            }
        }
    }

    private static byte[] serialize(Message message, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = message.size(cache, version);
        ByteBuffer buffer = ByteBuffer.allocate(size);
        message.write(new ByteBufferAccessor(buffer), cache, version);
        if (buffer.hasRemaining()) {
            throw new IllegalStateException("size() and write() disagree");
        }
        return buffer.array();
    }

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            sb.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
        }
        return sb.toString();
    }

    private static byte[] unhex(String text) {
        byte[] bytes = new byte[text.length() / 2];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }
}

import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.Errors;

/**
 * Prints every constant of Kafka's own error table, the enum Errors of kafka-clients, one a
 * line: code, name, whether its exception is retriable, and its default message, separated by
 * tabs. The code generator (protocol/codegen/jars.py) runs it from source against a release's
 * jars and writes protocol/contracts/kafka_errors.py from what it prints: the codes are not in
 * the JSON message specs, and a copy typed by hand would drift from Kafka's.
 */
public class ErrorCodes {
    public static void main(String[] args) {
        StringBuilder out = new StringBuilder();
        for (Errors error : Errors.values()) {
            boolean retriable = error.exception() instanceof RetriableException;
            String message = error.message().replaceAll("\\s+", " ").trim();
            out.append(error.code()).append('\t').append(error.name()).append('\t')
                .append(retriable).append('\t').append(message).append('\n');
        }
        System.out.print(out);
    }
}

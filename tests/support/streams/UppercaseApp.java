import java.nio.file.Files;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

/**
 * A Kafka Streams application for Herald's tests: reads `input`, writes each value upper-cased
 * to `output`, until it is terminated. Arguments: bootstrap, application id, input, output,
 * group protocol (classic or streams), processing guarantee (at_least_once, exactly_once_v2).
 * Prints "state RUNNING" (and every other state) as the application moves, for the test to
 * wait on.
 */
public final class UppercaseApp {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put("group.protocol", args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATE_DIR_CONFIG,
                  Files.createTempDirectory("herald-streams-").toString());
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[2]).mapValues(v -> v.toUpperCase()).to(args[3]);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}

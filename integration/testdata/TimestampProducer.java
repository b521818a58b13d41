// TimestampProducer writes records with the timestamps it is given, through
// Kafka's own Java producer: an independent client for the tests of record
// timestamps (the Go client exactly uses cannot write one after 2262).
//
// Run as a single-file source program (JEP 330):
//
//	java -cp "$KAFKA_LIBS/*" TimestampProducer.java <brokers> <topic>
//
// stdin: one record a line, key TAB value TAB timestamp (Unix ms). Each
// record is sent with acks=all and waited for; a failure exits 1.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TimestampProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] f = line.split("\t", 3);
                producer.send(new ProducerRecord<>(args[1], null, Long.parseLong(f[2]), f[0], f[1])).get();
            }
        }
    }
}

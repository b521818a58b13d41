package io.exactly.peer;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The Kafka Streams peer of exactly's benchmark: one stateless stage, one
 * instance, one stream thread, exactly_once_v2, commit.interval.ms=100.
 *
 * <p>Modes, each the same work as the exactly stage it is compared with:
 * <ul>
 *   <li>{@code pass}: parse the JSON value, key by event_id, forward the
 *       input bytes unchanged (exactly with {@code key: event_id} and no
 *       transform).</li>
 *   <li>{@code cel}: parse, keep records with amount &gt;= 0, set tier and
 *       total_cents, drop internal, key by event_id, write the new JSON
 *       (exactly's 3-step CEL transform).</li>
 * </ul>
 * A record that is not a JSON object is dropped (the benchmark has none).
 *
 * <p>Usage: Peer BOOTSTRAP APPLICATION_ID INPUT OUTPUT MODE STATE_DIR [KEY=VALUE ...]
 *
 * <p>Each KEY=VALUE is one more StreamsConfig property, e.g.
 * {@code producer.batch.size=1000012} or {@code consumer.fetch.max.wait.ms=5000}:
 * the benchmark's "matched" rows set the producer and fetch sizes that
 * exactly's stage uses. The effective producer and consumer settings are
 * printed to stderr at start.
 */
public final class Peer {
  private static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    if (args.length < 6) {
      System.err.println("usage: Peer BOOTSTRAP APPLICATION_ID INPUT OUTPUT pass|cel STATE_DIR [KEY=VALUE ...]");
      System.exit(2);
    }
    String mode = args[4];
    if (!mode.equals("pass") && !mode.equals("cel")) {
      System.err.println("mode must be pass or cel");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    for (int i = 6; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("not KEY=VALUE: " + args[i]);
        System.exit(2);
      }
      p.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    printEffective(new StreamsConfig(p));

    StreamsBuilder b = new StreamsBuilder();
    KStream<byte[], byte[]> in = b.stream(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
    KStream<byte[], byte[]> out = mode.equals("pass")
        ? in.flatMap((k, v) -> pass(v))
        : in.flatMap((k, v) -> transform(v));
    out.to(args[3], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.setStateListener((now, before) -> System.err.println("state " + before + " -> " + now));
    streams.start();
    done.await();
  }

  /** Prints the producer and main consumer settings the benchmark compares. */
  private static void printEffective(StreamsConfig c) {
    java.util.Map<String, Object> prod = new java.util.HashMap<>(c.getProducerConfigs("peer"));
    java.util.Map<String, Object> cons = new java.util.HashMap<>(c.getMainConsumerConfigs("peer", "peer", 0));
    prod.put("key.serializer", ByteArraySerializer.class);
    prod.put("value.serializer", ByteArraySerializer.class);
    cons.put("key.deserializer", ByteArrayDeserializer.class);
    cons.put("value.deserializer", ByteArrayDeserializer.class);
    java.util.Map<String, ?> pv = new ProducerConfig(prod).values();
    java.util.Map<String, ?> cv = new ConsumerConfig(cons).values();
    StringBuilder b = new StringBuilder("effective:");
    for (String k : new String[] {"batch.size", "linger.ms", "compression.type", "max.in.flight.requests.per.connection"}) {
      b.append(' ').append("producer.").append(k).append('=').append(pv.get(k));
    }
    for (String k : new String[] {"fetch.max.bytes", "max.partition.fetch.bytes", "fetch.min.bytes", "fetch.max.wait.ms", "max.poll.records"}) {
      b.append(' ').append("consumer.").append(k).append('=').append(cv.get(k));
    }
    System.err.println(b);
  }

  private static java.util.List<KeyValue<byte[], byte[]>> pass(byte[] v) {
    try {
      JsonNode n = JSON.readTree(v);
      if (!n.isObject() || !n.hasNonNull("event_id")) {
        return java.util.List.of();
      }
      return java.util.List.of(KeyValue.pair(n.get("event_id").asText().getBytes(java.nio.charset.StandardCharsets.UTF_8), v));
    } catch (Exception e) {
      return java.util.List.of();
    }
  }

  private static java.util.List<KeyValue<byte[], byte[]>> transform(byte[] v) {
    try {
      JsonNode n = JSON.readTree(v);
      if (!n.isObject() || !n.hasNonNull("event_id")) {
        return java.util.List.of();
      }
      ObjectNode o = (ObjectNode) n;
      long amount = o.get("amount").asLong();
      if (amount < 0) {
        return java.util.List.of(); // filter
      }
      o.put("tier", amount > 500 ? "gold" : "std"); // set
      o.put("total_cents", amount * 100);
      o.remove("internal"); // drop
      byte[] key = o.get("event_id").asText().getBytes(java.nio.charset.StandardCharsets.UTF_8);
      return java.util.List.of(KeyValue.pair(key, JSON.writeValueAsBytes(o)));
    } catch (Exception e) {
      return java.util.List.of();
    }
  }
}

package io.exactly.peer;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams peer of exactly's benchmark: one stage, one instance,
 * one stream thread, exactly_once_v2, commit.interval.ms=100.
 *
 * <p>Modes, each the same work as the exactly stage it is compared with:
 * <ul>
 *   <li>{@code pass}: parse the JSON value, key by event_id, forward the
 *       input bytes unchanged (exactly with {@code key: event_id} and no
 *       transform).</li>
 *   <li>{@code cel}: parse, keep records with amount &gt;= 0, set tier and
 *       total_cents, drop internal, key by event_id, write the new JSON
 *       (exactly's 3-step CEL transform).</li>
 *   <li>{@code window:GRACE_MS}: per record key, 1-minute tumbling windows
 *       over the event time in the value's {@code ts} (Unix ms, read by a
 *       timestamp extractor), the count and the sum of {@code amount},
 *       final results only: groupByKey (the input is keyed by the group, so
 *       no repartition), windowedBy(TimeWindows.ofSizeAndGrace(1m, GRACE)),
 *       aggregate into the default store (RocksDB, with its changelog
 *       topic), suppress(untilWindowCloses). Each result is written as
 *       {@code {"key","start_ms","end_ms","n","total"}} keyed by the key
 *       (exactly's aggregate step with emit: final).</li>
 *   <li>{@code join:TABLE:HISTORY_MS}: a KStream-KTable join of the input,
 *       keyed by customer ID, with the table topic TABLE (same key, same
 *       partition count), the table materialized in a versioned store
 *       (Stores.persistentVersionedKeyValueStore, history HISTORY_MS, with
 *       its changelog topic), so that each record is joined with the
 *       table as of its timestamp; each order is written with the
 *       customer's JSON value added as {@code customer} (exactly's join
 *       step with {@code as: customer}).</li>
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
      System.err.println("usage: Peer BOOTSTRAP APPLICATION_ID INPUT OUTPUT pass|cel|window:GRACE_MS|join:TABLE:HISTORY_MS STATE_DIR [KEY=VALUE ...]");
      System.exit(2);
    }
    String mode = args[4];
    long graceMs = -1;
    if (mode.startsWith("window:")) {
      graceMs = Long.parseLong(mode.substring("window:".length()));
      mode = "window";
    }
    String table = null;
    long historyMs = -1;
    if (mode.startsWith("join:")) {
      String[] parts = mode.split(":");
      table = parts[1];
      historyMs = Long.parseLong(parts[2]);
      mode = "join";
    }
    if (!mode.equals("pass") && !mode.equals("cel") && !mode.equals("window") && !mode.equals("join")) {
      System.err.println("mode must be pass, cel, window:GRACE_MS or join:TABLE:HISTORY_MS");
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
    if (mode.equals("window")) {
      windowed(b, args[2], args[3], graceMs);
    } else if (mode.equals("join")) {
      joined(b, args[2], table, args[3], historyMs);
    } else {
      KStream<byte[], byte[]> in = b.stream(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
      KStream<byte[], byte[]> out = mode.equals("pass")
          ? in.flatMap((k, v) -> pass(v))
          : in.flatMap((k, v) -> transform(v));
      out.to(args[3], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    }

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

  private static final JsonFactory FACTORY = new JsonFactory();

  /** The windowed count topology of mode window (see the class comment). */
  private static void windowed(StreamsBuilder b, String input, String output, long graceMs) {
    b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()).withTimestampExtractor(new EventTime()))
        .mapValues(v -> topLong(v, "amount"))
        .filter((k, v) -> k != null && v != null)
        .groupByKey(Grouped.with(Serdes.ByteArray(), Serdes.Long()))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofMillis(graceMs)))
        .aggregate(() -> new long[2], (k, amount, agg) -> new long[] {agg[0] + 1, agg[1] + amount},
            Materialized.with(Serdes.ByteArray(), COUNT_SUM))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((Windowed<byte[]> w, long[] agg) -> KeyValue.pair(w.key(), windowJson(w, agg)))
        .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
  }

  /** The join topology of mode join (see the class comment). */
  private static void joined(StreamsBuilder b, String input, String table, String output, long historyMs) {
    KTable<byte[], byte[]> customers = b.table(table, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()),
        Materialized.<byte[], byte[]>as(Stores.persistentVersionedKeyValueStore("customers", Duration.ofMillis(historyMs)))
            .withKeySerde(Serdes.ByteArray())
            .withValueSerde(Serdes.ByteArray()));
    b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .join(customers, Peer::withCustomer)
        .filter((k, v) -> v != null)
        .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
  }

  /** The order with the customer's JSON value as its {@code customer}; null if either is no JSON object. */
  private static byte[] withCustomer(byte[] order, byte[] customer) {
    try {
      JsonNode o = JSON.readTree(order);
      JsonNode c = JSON.readTree(customer);
      if (!o.isObject()) {
        return null;
      }
      ((ObjectNode) o).set("customer", c);
      return JSON.writeValueAsBytes(o);
    } catch (Exception e) {
      return null;
    }
  }

  /** The count and sum of a window, 16 bytes: count, then sum, big-endian. */
  private static final Serde<long[]> COUNT_SUM = Serdes.serdeFrom(
      (topic, agg) -> agg == null ? null : ByteBuffer.allocate(16).putLong(agg[0]).putLong(agg[1]).array(),
      (topic, bytes) -> {
        if (bytes == null) {
          return null;
        }
        ByteBuffer bb = ByteBuffer.wrap(bytes);
        return new long[] {bb.getLong(), bb.getLong()};
      });

  private static byte[] windowJson(Windowed<byte[]> w, long[] agg) {
    ObjectNode o = JSON.createObjectNode();
    o.put("key", new String(w.key(), StandardCharsets.UTF_8));
    o.put("start_ms", w.window().start());
    o.put("end_ms", w.window().end());
    o.put("n", agg[0]);
    o.put("total", agg[1]);
    try {
      return JSON.writeValueAsBytes(o);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  /**
   * The event time: the value's top-level {@code ts} (Unix ms), or -1
   * (Kafka Streams then skips the record) when there is none.
   */
  public static final class EventTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      Long ts = record.value() instanceof byte[] v ? topLong(v, "ts") : null;
      return ts == null ? -1 : ts;
    }
  }

  /**
   * The integer field name of a JSON object, read with Jackson's streaming
   * parser up to that field only; null if the value is not an object or
   * has no such integer field.
   */
  private static Long topLong(byte[] v, String name) {
    try (JsonParser p = FACTORY.createParser(v)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      for (JsonToken t = p.nextToken(); t == JsonToken.FIELD_NAME; t = p.nextToken()) {
        String f = p.currentName();
        JsonToken vt = p.nextToken();
        if (f.equals(name)) {
          return vt == JsonToken.VALUE_NUMBER_INT ? p.getLongValue() : null;
        }
        p.skipChildren();
      }
      return null;
    } catch (Exception e) {
      return null;
    }
  }
}

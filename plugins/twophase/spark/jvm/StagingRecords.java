package twophase;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Semaphore;
import java.util.zip.CRC32;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Produce one Spark partition's records to a Kafka staging topic (the JVM form of
 * participants/kafka/writer.py's KafkaWriter): the same headers (load_id, the partition,
 * the attempt, the target's own), an idempotent producer waiting for every replica, and a
 * report of the records and their summed checksums.
 *
 * The client bounds what it buffers by compressed bytes (buffer.memory) but keeps a few
 * objects per record until its batch is acknowledged, about as many bytes again as a narrow
 * record: with lz4 a full pool held half a million of them, tens of MB of the driver's heap
 * per task. So at most max_in_flight records are unacknowledged at once: write() takes a
 * permit before each send, and the callback (called for every record) gives it back.
 *
 * Each record's key is a column Spark computed; its value and checksum (CRC-32 of key then
 * value) are either columns Spark computed too, or made here (RecordJson: the value as
 * Spark's to_json would make it, in a fraction of its time).
 *
 * Spec (KafkaWriter.jvm_spec): bootstrap, topic, key, and either value and crc or
 * RecordJson's json.* settings (the row's ordinals of the columns), load_id, header.load,
 * header.part, header.attempt (names), extra.N (name=hex value, the target's own headers),
 * producer.NAME (settings), max_in_flight, and when the topics limit records: max_message_bytes,
 * limited_by (the topic of that limit) and framing (what headers and framing take of it,
 * but for the partition number's digits).
 */
final class StagingRecords implements StagePass.Writer {
    private final Map<String, String> spec;
    private final int key, value, crc;
    private final RecordJson json;  // null: Spark computed each value and checksum
    private final CRC32 crc32 = new CRC32();
    private long room = Long.MAX_VALUE;  // the most key + value bytes a record may have
    private KafkaProducer<byte[], byte[]> producer;
    private List<Header> headers;
    private final String topic;
    private volatile Exception failed;
    private final Semaphore inFlight;
    private final Callback acknowledged;
    private long records, checksum;
    private int part;

    StagingRecords(Map<String, String> spec) {
        this.spec = spec;
        topic = spec.get("topic");
        key = Integer.parseInt(spec.get("key"));
        json = spec.containsKey("json.columns") ? new RecordJson(spec) : null;
        value = json == null ? Integer.parseInt(spec.get("value")) : -1;
        crc = json == null ? Integer.parseInt(spec.get("crc")) : -1;
        inFlight = new Semaphore(Integer.parseInt(spec.get("max_in_flight")));
        acknowledged = (metadata, e) -> {
            if (e != null && failed == null) {
                failed = e;
            }
            inFlight.release();
        };
    }

    @Override
    public void open(int part, String attempt) {
        this.part = part;
        if (spec.containsKey("framing")) {
            room = Long.parseLong(spec.get("max_message_bytes")) - Long.parseLong(spec.get("framing"))
                    - Integer.toString(part).length();
        }
        headers = new ArrayList<>();
        headers.add(header(spec.get("header.load"), spec.get("load_id")));
        headers.add(header(spec.get("header.part"), Integer.toString(part)));
        headers.add(header(spec.get("header.attempt"), attempt));
        for (int i = 0; spec.containsKey("extra." + i); i++) {
            String[] nameValue = spec.get("extra." + i).split("=", 2);
            headers.add(new RecordHeader(nameValue[0], StagePass.hex(nameValue[1])));
        }
        Properties props = new Properties();
        for (Map.Entry<String, String> e : spec.entrySet()) {
            if (e.getKey().startsWith("producer.")) {
                props.setProperty(e.getKey().substring(9), e.getValue());
            }
        }
        props.setProperty("bootstrap.servers", spec.get("bootstrap"));
        producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    }

    @Override
    public void write(InternalRow row) {
        byte[] k = row.isNullAt(key) ? null : row.getBinary(key);
        byte[] v = json != null ? json.value(row) : row.isNullAt(value) ? null : row.getBinary(value);
        if ((k == null ? 0 : k.length) + (v == null ? 0 : v.length) > room) {
            throw tooLarge(k, v);
        }
        if (failed != null) {
            throw new IllegalStateException(problem());
        }
        try {
            inFlight.acquire();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();  // Spark kills a task by interrupting it
            throw new IllegalStateException("Kafka staging of Spark partition " + part + " was interrupted", e);
        }
        try {
            producer.send(new ProducerRecord<>(topic, null, k, v, headers), acknowledged);
        } catch (RuntimeException e) {
            inFlight.release();  // a send that throws never calls back
            throw e instanceof TimeoutException ? unreachable(e) : e;
        }
        checksum += json != null ? checksum(k, v) : row.getLong(crc);
        records++;
    }

    @Override
    public String close() {
        producer.flush();
        if (failed != null) {
            throw failed instanceof TimeoutException ? unreachable(failed) : new IllegalStateException(problem());
        }
        producer.close();
        return "{\"records\": " + records + ", \"checksum\": " + Long.toUnsignedString(checksum) + "}";
    }

    @Override
    public void discard() {
        try {
            producer.close(Duration.ZERO);
        } catch (Exception e) {
            // discarding a failed attempt must not hide its error
        }
    }

    @Override
    public void die() {
        discard();
    }

    /** What Spark's crc32(concat(coalesce(key, X''), value)) gives. */
    private long checksum(byte[] k, byte[] v) {
        crc32.reset();
        if (k != null) {
            crc32.update(k);
        }
        crc32.update(v);
        return crc32.getValue();
    }

    private String problem() {
        return "Kafka staging failed: a record of Spark partition " + part + " was not acknowledged by every replica: "
                + failed;
    }

    private RuntimeException unreachable(Exception e) {
        return StagePass.failure("KafkaUnreachable", "Kafka at " + spec.get("bootstrap") + " is unreachable: "
                + e.getMessage() + ": Spark partition " + part + " staged " + records + " records");
    }

    /** RecordTooLarge, with what KafkaWriter's message is made of (kafka/writer.py's too_large). */
    private RuntimeException tooLarge(byte[] k, byte[] v) {
        long size = (k == null ? 0 : k.length) + (v == null ? 0 : v.length);
        long limit = Long.parseLong(spec.get("max_message_bytes"));
        return StagePass.failure("RecordTooLarge", size, k == null ? "" : "key", k == null ? new byte[0] : k, limit,
                limit - room, spec.get("limited_by"));
    }

    private static RecordHeader header(String name, String text) {
        return new RecordHeader(name, text.getBytes(StandardCharsets.UTF_8));
    }
}

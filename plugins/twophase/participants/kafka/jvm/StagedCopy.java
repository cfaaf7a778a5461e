import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The commit copy of jvm_copy.py, in a JVM: the same copy as copy.py's _copy (a load's
 * staged records to its target topics inside one Kafka transaction), at the Java client's
 * speed. Python drives it and keeps every decision: what to copy, whether the counts and
 * checksums match, whether to commit.
 *
 * Standard input: the job (lines "name value...", fields tab-separated, free text in hex),
 * up to "end"; then one command per line: copy, abort, commit (after "offset" lines), quit.
 * Standard output: one event per line (ready, progress, half, copied, timed_out, aborted,
 * committed, error). The end of standard input without a quit (Python gone: a crash, a
 * kill) halts the JVM at once, whatever it was doing: a copy is committed only on Python's
 * word. After a quit it halts QUIT_MS later if still stuck in a call (Python gave up on it).
 */
public final class StagedCopy {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    private static final HexFormat HEX = HexFormat.of();
    private static final long QUIT_MS = Long.getLong("twophase.copy.quit_ms", 10_000);  // jvm_copy.QUIT_S

    private final Properties producerConf = new Properties();
    private final Properties consumerConf = new Properties();
    private final Map<String, List<Header>> headers = new HashMap<>();    // staging topic -> the targets' headers
    private final Map<TopicPartition, long[]> ranges = new HashMap<>();   // staging partition -> {first, last}
    private final Map<String, String> targetOf = new HashMap<>();         // staging topic -> target topic
    private final Map<String, Boolean> dense = new HashMap<>();           // staging topic -> no filtering needed
    private final Map<String, Winners> winners = new HashMap<>();           // staging topic -> its winners
    private byte[] loadId = new byte[0];
    private long expected;
    private long deadlineMs;  // set by the copy command
    private KafkaConsumer<byte[], byte[]> consumer;

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--warm")) {
            warm();
            return;
        }
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            boolean quit = false;
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                    quit = line.equals("quit");
                    lines.add(line);
                }
            } catch (Exception ignored) {
                // the same as the end of input
            }
            if (!quit) {  // the driver is gone: stop now, whatever the copy was doing
                Runtime.getRuntime().halt(3);
            }
            try {  // told to quit: the main thread ends the JVM, unless stuck in a call
                Thread.sleep(QUIT_MS);
            } catch (InterruptedException ignored) {
                // halt all the same
            }
            Runtime.getRuntime().halt(4);
        });
        reader.setDaemon(true);
        reader.start();
        StagedCopy copy = new StagedCopy();
        for (String line; !(line = lines.take()).equals("end"); ) {
            copy.read(line.split("\t", -1));
        }
        copy.run(lines);
    }

    /** Load the clients' classes and end: run once with -XX:ArchiveClassesAtExit, it makes the
     *  class archive every later start maps instead of loading them (jvm_copy.compiled). Made
     *  without connecting to anything. */
    private static void warm() {
        Properties conf = new Properties();
        conf.put("bootstrap.servers", "127.0.0.1:9");
        conf.put("transactional.id", "twophase-warm");
        conf.put("compression.type", "lz4");
        new KafkaProducer<>(conf, new ByteArraySerializer(), new ByteArraySerializer()).close(Duration.ZERO);
        conf.remove("transactional.id");
        conf.put("group.id", "twophase-warm");
        new KafkaConsumer<>(conf, new ByteArrayDeserializer(), new ByteArrayDeserializer()).close(Duration.ZERO);
    }

    private void read(String[] f) {
        switch (f[0]) {
            case "producer" -> producerConf.put(f[1], f[2]);
            case "consumer" -> consumerConf.put(f[1], f[2]);
            case "header" -> headers.get(f[1]).add(new RecordHeader(text(f[2]), HEX.parseHex(f[3])));
            case "load" -> loadId = HEX.parseHex(f[1]);
            case "expected" -> expected = Long.parseLong(f[1]);
            case "topic" -> {  // staging, target, dense
                targetOf.put(f[1], f[2]);
                dense.put(f[1], f[3].equals("1"));
                winners.put(f[1], new Winners());
                headers.put(f[1], new ArrayList<>());
            }
            case "range" -> ranges.put(new TopicPartition(f[1], Integer.parseInt(f[2])),
                                       new long[] {Long.parseLong(f[3]), Long.parseLong(f[4])});
            case "winner" -> winners.get(f[1]).attempts.put(text(f[2]), text(f[3]));
            default -> throw new IllegalArgumentException("unknown job line: " + f[0]);
        }
    }

    private void run(BlockingQueue<String> commands) throws InterruptedException {
        KafkaProducer<byte[], byte[]> producer = null;
        CompletableFuture<KafkaConsumer<byte[], byte[]>> opening = CompletableFuture.supplyAsync(this::open);
        boolean open = false;
        try {
            producer = new KafkaProducer<>(producerConf, new ByteArraySerializer(), new ByteArraySerializer());
            producer.initTransactions();
            consumer = opened(opening);
            say("ready");
            for (String command; !(command = commands.take()).equals("quit"); ) {
                String[] f = command.split("\t", -1);
                switch (f[0]) {
                    case "copy" -> {  // copy, milliseconds left before the deadline
                        deadlineMs = System.currentTimeMillis() + Long.parseLong(f[1]);
                        producer.beginTransaction();
                        open = true;
                        copy(producer);
                    }
                    case "abort" -> {
                        producer.abortTransaction();
                        open = false;
                        say("aborted");
                    }
                    case "commit" -> {
                        commit(producer, commands);
                        open = false;
                        say("committed");
                    }
                    default -> throw new IllegalArgumentException("unknown command: " + command);
                }
            }
        } catch (RuntimeException e) {
            fail(e, producer, open);
        } finally {
            if (producer != null) {
                producer.close(Duration.ZERO);
            }
            opening.thenAccept(opened -> opened.close(Duration.ZERO));
        }
        OUT.flush();
        System.exit(0);
    }

    /** The copy's consumer, at the start of every staged range (opened while the producer
     *  starts its transactions: the two start in half the time of one after the other). */
    private KafkaConsumer<byte[], byte[]> open() {
        KafkaConsumer<byte[], byte[]> opened =
                new KafkaConsumer<>(consumerConf, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        opened.assign(ranges.keySet());
        ranges.forEach((tp, range) -> opened.seek(tp, range[0]));
        return opened;
    }

    private static KafkaConsumer<byte[], byte[]> opened(CompletableFuture<KafkaConsumer<byte[], byte[]>> opening) {
        try {
            return opening.join();
        } catch (CompletionException e) {
            throw e.getCause() instanceof RuntimeException cause ? cause : e;
        }
    }

    /** Copy every staged range into the open transaction, in two threads: this one consumes,
     *  picks the load's records and tallies them; a Sender produces them (appending with lz4
     *  is half the work). Ends saying copied (the tallies) or timed_out (how far it got). */
    private void copy(KafkaProducer<byte[], byte[]> producer) throws InterruptedException {
        Map<String, long[]> counts = new HashMap<>();  // staging topic -> {records, checksum}
        for (String staging : targetOf.keySet()) {
            counts.put(staging, new long[2]);
        }
        Map<TopicPartition, Long> last = new HashMap<>();
        ranges.forEach((tp, range) -> last.put(tp, range[1]));
        long reported = System.currentTimeMillis();
        CRC32 crc = new CRC32();
        Sender sender = new Sender(producer, (expected + 1) / 2);
        sender.start();
        try {
            while (!last.isEmpty()) {
                long now = System.currentTimeMillis();
                if (now > deadlineMs) {
                    sender.halt();
                    say("timed_out\t" + sender.sent + "\t0");
                    return;
                }
                if (now - reported >= 1000) {
                    reported = now;
                    say("progress\t" + sender.sent + "\t" + pending(last));
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                for (TopicPartition tp : batch.partitions()) {
                    Long end = last.get(tp);
                    if (end == null) {
                        continue;
                    }
                    String staging = tp.topic();
                    Winners check = dense.get(staging) ? null : winners.get(staging);
                    long[] tally = counts.get(staging);
                    Chunk chunk = new Chunk(targetOf.get(staging), headers.get(staging));
                    for (ConsumerRecord<byte[], byte[]> record : batch.records(tp)) {
                        long offset = record.offset();
                        if (offset > end) {
                            break;
                        }
                        if (check == null || promotes(check, record.headers())) {
                            crc.reset();
                            if (record.key() != null) {
                                crc.update(record.key());
                            }
                            if (record.value() != null) {
                                crc.update(record.value());
                            }
                            tally[0] += 1;
                            tally[1] += crc.getValue();
                            if (chunk.add(record.key(), record.value())) {
                                sender.hand(chunk);
                                chunk = new Chunk(chunk.target, chunk.headers);
                            }
                        }
                        if (offset == end) {
                            break;
                        }
                    }
                    if (chunk.size > 0) {
                        sender.hand(chunk);
                    }
                    if (consumer.position(tp) > end) {
                        last.remove(tp);
                        consumer.pause(List.of(tp));
                    }
                }
            }
            sender.finish();
        } finally {
            sender.halt();
        }
        producer.flush();
        if (System.currentTimeMillis() > deadlineMs) {
            say("timed_out\t" + sender.sent + "\t1");
            return;
        }
        StringBuilder line = new StringBuilder("copied");
        counts.forEach((staging, tally) ->
                line.append('\t').append(staging).append('\t').append(tally[0]).append('\t')
                    .append(Long.toUnsignedString(tally[1])));
        say(line.toString());
    }

    /** A staged record of this load, from the winning attempt of its Spark partition: the
     *  headers KafkaWriter writes first are load_id, twophase.part, twophase.attempt. */
    private boolean promotes(Winners check, Headers h) {
        Iterator<Header> it = h.iterator();
        if (!it.hasNext() || !Arrays.equals(it.next().value(), loadId) || !it.hasNext()) {
            return false;
        }
        byte[] part = it.next().value();
        return it.hasNext() && check.won(part, it.next().value());
    }

    /** A staging topic's winning attempt of each Spark partition. The last verdict is kept:
     *  a staging partition's records come in runs of one task's. */
    private static final class Winners {
        private final Map<String, String> attempts = new HashMap<>();  // part -> attempt
        private byte[] part;
        private byte[] attempt;
        private boolean verdict;

        boolean won(byte[] part, byte[] attempt) {
            if (!Arrays.equals(part, this.part) || !Arrays.equals(attempt, this.attempt)) {
                String winner = attempts.get(new String(part, StandardCharsets.UTF_8));
                verdict = winner != null && winner.equals(new String(attempt, StandardCharsets.UTF_8));
                this.part = part;
                this.attempt = attempt;
            }
            return verdict;
        }
    }

    /** Up to CAPACITY records to produce to one target, with its headers: their keys and
     *  values only (the consumed records die young, in the consuming thread: records held
     *  for the other thread live through collections, and copying them costs more than
     *  the second thread gains). */
    private static final class Chunk {
        static final int CAPACITY = 1000;
        final String target;
        final List<Header> headers;
        final byte[][] keys = new byte[CAPACITY][];
        final byte[][] values = new byte[CAPACITY][];
        int size;

        Chunk(String target, List<Header> headers) {
            this.target = target;
            this.headers = headers;
        }

        /** Add a record; true once full. */
        boolean add(byte[] key, byte[] value) {
            keys[size] = key;
            values[size] = value;
            return ++size == CAPACITY;
        }
    }

    private static final Chunk END = new Chunk(null, null);

    /** The producing thread of a copy: sends the chunks it is handed, in their order (so each
     *  staging partition's records keep theirs), and says half once half the records are
     *  sent and flushed (the crash tests' failpoint kafka.copy_middle waits for it). */
    private static final class Sender extends Thread {
        private final KafkaProducer<byte[], byte[]> producer;
        private final long half;
        private final BlockingQueue<Chunk> chunks = new ArrayBlockingQueue<>(4);
        private volatile long sent;
        private volatile RuntimeException failure;

        Sender(KafkaProducer<byte[], byte[]> producer, long half) {
            super("copy-sender");
            setDaemon(true);
            this.producer = producer;
            this.half = half;
        }

        @Override
        public void run() {
            try {
                for (Chunk chunk; (chunk = chunks.take()) != END; ) {
                    send(chunk);
                }
            } catch (InterruptedException stopped) {
                // halt(): the copy timed out or failed
            } catch (RuntimeException e) {
                failure = e;
            }
        }

        private void send(Chunk chunk) {
            long n = sent;
            for (int i = 0; i < chunk.size; i++) {
                producer.send(new ProducerRecord<>(chunk.target, null, chunk.keys[i], chunk.values[i], chunk.headers));
                if (++n == half) {
                    producer.flush();
                    say("half\t" + n);
                }
            }
            sent = n;
        }

        /** Queue a chunk, waiting while the sender is behind; raises what stopped it. */
        void hand(Chunk chunk) throws InterruptedException {
            while (!chunks.offer(chunk, 100, TimeUnit.MILLISECONDS)) {
                raise();
                if (!isAlive()) {  // ended by an Error: nothing takes chunks any more
                    throw new IllegalStateException("the copy's sending thread ended early");
                }
            }
            raise();
        }

        /** Wait until every chunk is sent; raises what stopped the sender. */
        void finish() throws InterruptedException {
            hand(END);
            join();
            raise();
        }

        /** Stop sending now (a timeout, a failure); idempotent. */
        void halt() throws InterruptedException {
            interrupt();
            join();
        }

        private void raise() {
            if (failure != null) {
                throw failure;
            }
        }
    }

    /** Commit: the offsets ("offset" lines: group, topic, partition, offset) go into the
     *  transaction, then it commits. */
    private void commit(KafkaProducer<byte[], byte[]> producer, BlockingQueue<String> commands)
            throws InterruptedException {
        Map<String, Map<TopicPartition, OffsetAndMetadata>> byGroup = new HashMap<>();
        for (String line; !(line = commands.take()).equals("offsets_end"); ) {
            String[] f = line.split("\t", -1);
            byGroup.computeIfAbsent(text(f[1]), g -> new HashMap<>())
                   .put(new TopicPartition(f[2], Integer.parseInt(f[3])), new OffsetAndMetadata(Long.parseLong(f[4])));
        }
        for (Map.Entry<String, Map<TopicPartition, OffsetAndMetadata>> group : byGroup.entrySet()) {
            producer.sendOffsetsToTransaction(group.getValue(), new ConsumerGroupMetadata(group.getKey()));
        }
        producer.commitTransaction();
    }

    private static String pending(Map<TopicPartition, Long> last) {
        StringBuilder out = new StringBuilder();
        for (TopicPartition tp : last.keySet()) {
            out.append(out.length() == 0 ? "" : ",").append(tp.topic()).append(':').append(tp.partition());
        }
        return out.toString();
    }

    /** An error as Kafka's protocol code (librdkafka uses the same numbers) and its kind,
     *  read from the first ApiException among its causes (the client wraps some); the
     *  client's own timeouts as librdkafka's _TIMED_OUT (-185). */
    private static void fail(RuntimeException e, KafkaProducer<byte[], byte[]> producer, boolean open) {
        Throwable cause = e;
        while (!(cause instanceof ApiException) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        int code = cause instanceof org.apache.kafka.common.errors.TimeoutException ? -185
                : cause instanceof ApiException ? Errors.forException(cause).code() : -1;
        boolean fatal = cause instanceof ProducerFencedException
                || cause instanceof org.apache.kafka.common.errors.InvalidProducerEpochException
                || cause instanceof org.apache.kafka.common.errors.AuthorizationException;
        boolean retriable = cause instanceof RetriableException;
        String message = e.getClass().getSimpleName() + ": " + e.getMessage();
        if (code == -1 && message.contains(Errors.INVALID_TRANSACTION_TIMEOUT.message())) {
            code = Errors.INVALID_TRANSACTION_TIMEOUT.code();  // initTransactions says it in words only
        }
        if (open && !fatal) {  // an open transaction would hold back the targets' read_committed readers
            try {
                producer.abortTransaction();
            } catch (RuntimeException again) {
                message += " (and aborting the transaction failed: " + again.getMessage() + ")";
            }
        }
        say("error\t" + code + "\t" + (fatal ? 1 : 0) + "\t" + (retriable ? 1 : 0) + "\t"
            + HEX.formatHex(message.getBytes(StandardCharsets.UTF_8)));
    }

    private static String text(String hex) {
        return new String(HEX.parseHex(hex), StandardCharsets.UTF_8);
    }

    private static void say(String event) {
        OUT.println(event);
    }
}

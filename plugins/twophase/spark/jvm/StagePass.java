package twophase;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RuntimeConfig;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.DateTimeUtils$;

/**
 * The staging pass in the executors' JVM (twophase/spark/jvm_stage.py): each Spark
 * partition's rows go once, as Spark's own rows, to the writer of every target the frame
 * feeds (StagingCopy: COPY into a Postgres staging table; StagingRecords: produce to a
 * Kafka staging topic). No row crosses to Python, and no value is converted to Arrow.
 *
 * Each writer is described by a map of strings (its "kind" and settings, built by the
 * Python writer's jvm_spec), to which run() adds the session's settings that to_json reads
 * (session.zone, session.ignore_null_fields). run() returns, per partition and writer of a
 * successful task attempt, one tab-separated line: part, attempt, rows, participant,
 * target, report (JSON).
 * A failed attempt discards every writer it opened and rethrows; Spark retries the task.
 *
 * The failpoints spark.partition_midway (after the first row) and spark.partition_staged
 * (every writer closed, nothing reported) act as twophase/failpoints.py says, with the
 * driver's settings: the attempt dies as a killed process would, its connections cut
 * without a word to the servers.
 */
public final class StagePass {
    private StagePass() {
    }

    /** A target's writer, one per partition attempt. */
    interface Writer {
        void open(int part, String attempt) throws Exception;

        void write(InternalRow row) throws Exception;

        /** Everything staged and durable; the report, a JSON object. */
        String close() throws Exception;

        /** The attempt failed: release what open() took; never throws. */
        void discard();

        /** The attempt dies (a failpoint): cut every connection without cleanup. */
        void die();
    }

    static Writer writer(Map<String, String> spec) {
        switch (spec.get("kind")) {
            case "postgres":
                return new StagingCopy(spec);
            case "kafka":
                return new StagingRecords(spec);
            default:
                throw new IllegalArgumentException("no JVM writer of kind " + spec.get("kind"));
        }
    }

    /**
     * A failure jvm_stage.py raises as twophase's own exception `name` (StagingRefused,
     * RecordTooLarge, KafkaUnreachable), whose message Python writes from `fields` as the
     * Python writers do: a plain RuntimeException "twophase.NAME:" then each field (bytes,
     * or a string as UTF-8) in hex, each after a space, as the driver deserializes only
     * Spark's and Java's own classes.
     */
    static RuntimeException failure(String name, Object... fields) {
        StringBuilder message = new StringBuilder("twophase.").append(name).append(':');
        for (Object field : fields) {
            message.append(' ');
            byte[] bytes = field instanceof byte[] ? (byte[]) field : field.toString().getBytes(StandardCharsets.UTF_8);
            for (byte b : bytes) {
                message.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
        }
        return new RuntimeException(message.toString());
    }

    /** The bytes of `text`, two hex digits each (how specs carry names and values of any bytes). */
    static byte[] hex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    /** The staging pass of `frame` to `writers`; one line per partition and writer. */
    public static String[] run(Dataset<Row> frame, List<Map<String, String>> writers, Map<String, String> failpoint) {
        RuntimeConfig conf = frame.sparkSession().conf();
        String zone = DateTimeUtils$.MODULE$.getZoneId(conf.get("spark.sql.session.timeZone")).getId();
        ArrayList<HashMap<String, String>> specs = new ArrayList<>();
        for (Map<String, String> spec : writers) {
            HashMap<String, String> copy = new HashMap<>(spec);
            copy.put("session.zone", zone);
            copy.put("session.ignore_null_fields", conf.get("spark.sql.jsonGenerator.ignoreNullFields"));
            specs.add(copy);
        }
        Partition each = new Partition(specs, new HashMap<>(failpoint));
        List<String> lines = frame.queryExecution().toRdd().toJavaRDD().mapPartitionsWithIndex(each, false).collect();
        return lines.toArray(new String[0]);
    }

    static final class Partition implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
        private static final long serialVersionUID = 1L;
        private final ArrayList<HashMap<String, String>> specs;
        private final HashMap<String, String> failpoint;

        Partition(ArrayList<HashMap<String, String>> specs, HashMap<String, String> failpoint) {
            this.specs = specs;
            this.failpoint = failpoint;
        }

        @Override
        public Iterator<String> call(Integer part, Iterator<InternalRow> rows) throws Exception {
            String attempt = UUID.randomUUID().toString().replace("-", "").substring(0, 16);
            List<Writer> opened = new ArrayList<>();
            long count = 0;
            List<String> reports = new ArrayList<>();
            try {
                for (HashMap<String, String> spec : specs) {
                    Writer w = writer(spec);
                    w.open(part, attempt);
                    opened.add(w);
                }
                while (rows.hasNext()) {
                    InternalRow row = rows.next();
                    for (Writer w : opened) {
                        w.write(row);
                    }
                    if (++count == 1) {
                        hit("spark.partition_midway", opened);
                    }
                }
                for (Writer w : opened) {
                    reports.add(w.close());
                }
            } catch (Throwable e) {
                for (Writer w : opened) {
                    w.discard();
                }
                throw e;
            }
            hit("spark.partition_staged", opened);
            List<String> lines = new ArrayList<>();
            for (int i = 0; i < specs.size(); i++) {
                lines.add(part + "\t" + attempt + "\t" + count + "\t" + specs.get(i).get("participant") + "\t"
                        + specs.get(i).get("target") + "\t" + reports.get(i));
            }
            return lines.iterator();
        }

        /** A failpoint of twophase/failpoints.py, with the driver's TWOPHASE_FAILPOINT* settings. */
        private void hit(String name, List<Writer> opened) throws IOException, InterruptedException {
            if (!name.equals(failpoint.get("point"))) {
                return;
            }
            String wait = failpoint.get("wait");
            if (wait != null) {
                System.err.println("twophase: failpoint " + name + ": this task attempt waits for " + wait);
                new File(wait + ".reached").createNewFile();
                long deadline = System.nanoTime() + 600_000_000_000L;
                while (!new File(wait).exists() && System.nanoTime() < deadline) {
                    Thread.sleep(100);
                }
                return;
            }
            String once = failpoint.get("once");
            if (once != null && !new File(once).createNewFile()) {
                return;
            }
            System.err.println("twophase: failpoint " + name + ": this task attempt dies");
            for (Writer w : opened) {
                w.die();
            }
            throw new RuntimeException("twophase failpoint " + name + ": the task attempt died");
        }
    }
}

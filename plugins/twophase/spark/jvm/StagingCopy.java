package twophase;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Executor;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyIn;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * COPY one Spark partition's rows into a Postgres staging table, as CSV made from Spark's
 * rows (the JVM form of participants/postgres/writer.py's PostgresWriter, with the same
 * transaction: an advisory lock on the staging table and partition, the rows of any
 * earlier attempt deleted, the COPY, one commit).
 *
 * Spec (PostgresWriter.jvm_spec): url, prop.NAME (JDBC properties: user, password...), lock
 * (the advisory lock's text key), delete (SQL, the partition as its one parameter), copy
 * (the COPY statement), staging and target (for messages), columns (the row's ordinals),
 * types (per column: string, byte, short, int, long, boolean, float, double, date,
 * timestamp, or decimal:P:S). Timestamps are written as UTC wall-clock time in a UTC session.
 */
final class StagingCopy implements StagePass.Writer {
    private static final Executor NOW = Runnable::run;
    private static final byte[] TRUE = {'t'}, FALSE = {'f'};

    private final Map<String, String> spec;
    private final ColumnTypes columns;
    private Connection conn;
    private CopyIn copy;
    private int part;
    private byte[] partField;
    private final byte[] buf = new byte[1 << 16];
    private int at;
    private long rows;

    StagingCopy(Map<String, String> spec) {
        this.spec = spec;
        columns = new ColumnTypes(spec.get("columns"), spec.get("types"));
    }

    @Override
    public void open(int part, String attempt) throws Exception {
        this.part = part;
        partField = Integer.toString(part).getBytes(StandardCharsets.US_ASCII);
        Properties props = new Properties();
        for (Map.Entry<String, String> e : spec.entrySet()) {
            if (e.getKey().startsWith("prop.")) {
                props.setProperty(e.getKey().substring(5), e.getValue());
            }
        }
        conn = new org.postgresql.Driver().connect(spec.get("url"), props);
        conn.setAutoCommit(false);
        try (Statement st = conn.createStatement()) {
            st.execute("set local time zone 'UTC'");
        }
        try (PreparedStatement lock = conn.prepareStatement("select pg_advisory_xact_lock(hashtext(?), ?)")) {
            lock.setString(1, spec.get("lock"));
            lock.setInt(2, part);
            lock.execute();
        }
        try (PreparedStatement delete = conn.prepareStatement(spec.get("delete"))) {
            delete.setInt(1, part);
            delete.execute();
        }
        copy = ((PGConnection) conn).getCopyAPI().copyIn(spec.get("copy"));
    }

    @Override
    public void write(InternalRow row) throws Exception {
        for (int i = 0; i < columns.size(); i++) {
            if (!row.isNullAt(columns.ordinal[i])) {
                value(row, columns.ordinal[i], i);
            }
            put((byte) ',');
        }
        put(partField);
        put((byte) '\n');
        rows++;
    }

    @Override
    public String close() throws Exception {
        long copied;
        try {
            flush();
            copied = copy.endCopy();
        } catch (SQLException e) {
            throw refusal(e);
        }
        if (copied != rows) {
            throw new IllegalStateException("partition " + part + ": COPY took " + copied + " rows of " + rows);
        }
        conn.commit();
        conn.close();
        return "{\"rows\": " + copied + "}";
    }

    @Override
    public void discard() {
        try {
            if (conn != null && !conn.isClosed()) {
                if (copy != null && copy.isActive()) {
                    copy.cancelCopy();
                }
                conn.close();
            }
        } catch (Exception e) {
            // discarding a failed attempt must not hide its error
        }
    }

    @Override
    public void die() {
        try {
            if (conn != null) {
                conn.abort(NOW);
            }
        } catch (Exception e) {
            // the attempt dies either way
        }
    }

    /**
     * `e` when Postgres did not refuse a value; else StagingRefused, thrown, with what
     * PostgresWriter's refusal message is made of (postgres/writer.py's refusal).
     */
    private SQLException refusal(SQLException e) {
        String state = e.getSQLState();
        if (!(e instanceof PSQLException) || state == null || !(state.startsWith("22") || state.startsWith("23"))) {
            return e;
        }
        ServerErrorMessage server = ((PSQLException) e).getServerErrorMessage();
        String primary = server != null && server.getMessage() != null ? server.getMessage() : e.getMessage();
        String context = server != null && server.getWhere() != null ? server.getWhere() : "";
        throw StagePass.failure("StagingRefused", primary, context, part, spec.get("staging"),
                spec.getOrDefault("target", ""));
    }

    // -- the CSV of one row -------------------------------------------------------------------

    private void value(InternalRow row, int ordinal, int i) throws SQLException {
        switch (columns.type[i]) {
            case ColumnTypes.STRING:
                string(row.getUTF8String(ordinal));
                break;
            case ColumnTypes.BYTE:
                number(row.getByte(ordinal));
                break;
            case ColumnTypes.SHORT:
                number(row.getShort(ordinal));
                break;
            case ColumnTypes.INT:
                number(row.getInt(ordinal));
                break;
            case ColumnTypes.LONG:
                number(row.getLong(ordinal));
                break;
            case ColumnTypes.BOOLEAN:
                put(row.getBoolean(ordinal) ? TRUE : FALSE);
                break;
            case ColumnTypes.FLOAT:
                putAscii(Float.toString(row.getFloat(ordinal)));
                break;
            case ColumnTypes.DOUBLE:
                putAscii(Double.toString(row.getDouble(ordinal)));
                break;
            case ColumnTypes.DECIMAL:
                decimal(row.getDecimal(ordinal, columns.precision[i], columns.scale[i]), columns.scale[i]);
                break;
            case ColumnTypes.DATE:
                date(row.getInt(ordinal));
                put(era);
                break;
            case ColumnTypes.TIMESTAMP:
                timestamp(row.getLong(ordinal));
                break;
            default:
                throw new IllegalArgumentException("no CSV form of type " + columns.type[i]);
        }
    }

    /** A text field: quoted when it is empty (an unquoted empty field is NULL) or holds , " CR LF. */
    private void string(UTF8String s) throws SQLException {
        byte[] bytes = s.getBytes();
        boolean quote = bytes.length == 0;
        for (byte b : bytes) {
            if (b == '"' || b == ',' || b == '\n' || b == '\r') {
                quote = true;
                break;
            }
        }
        if (!quote) {
            put(bytes);
            return;
        }
        put((byte) '"');
        for (byte b : bytes) {
            if (b == '"') {
                put((byte) '"');
            }
            put(b);
        }
        put((byte) '"');
    }

    private void decimal(Decimal d, int scale) throws SQLException {
        if (d.precision() > 18) {
            putAscii(d.toJavaBigDecimal().toPlainString());
            return;
        }
        long unscaled = d.toUnscaledLong();
        if (unscaled < 0) {
            put((byte) '-');
            unscaled = -unscaled;
        }
        long unit = 1;
        for (int i = 0; i < scale; i++) {
            unit *= 10;
        }
        number(unscaled / unit);
        if (scale > 0) {
            put((byte) '.');
            digits(unscaled % unit, scale);
        }
    }

    private static final byte[] AD = {}, BC = " BC".getBytes(StandardCharsets.US_ASCII);
    private final CivilDate calendar = new CivilDate();
    private byte[] era = AD;  // of the last date() written: Postgres writes years before 1 as "0001-... BC"

    /** The date of a day count since 1970-01-01 (CivilDate), its era in `era`. */
    private void date(int days) throws SQLException {
        long date = calendar.of(days);
        long year = CivilDate.year(date);
        era = year < 1 ? BC : AD;
        year = year < 1 ? 1 - year : year;  // 1 BC is year 0
        if (year > 9999) {
            number(year);
        } else {
            digits(year, 4);
        }
        put((byte) '-');
        digits(CivilDate.month(date), 2);
        put((byte) '-');
        digits(CivilDate.day(date), 2);
    }

    private void timestamp(long micros) throws SQLException {
        long seconds = Math.floorDiv(micros, 1_000_000L);
        long fraction = Math.floorMod(micros, 1_000_000L);
        long ofDay = Math.floorMod(seconds, 86400L);
        date((int) Math.floorDiv(seconds, 86400L));
        put((byte) ' ');
        digits(ofDay / 3600, 2);
        put((byte) ':');
        digits(ofDay / 60 % 60, 2);
        put((byte) ':');
        digits(ofDay % 60, 2);
        if (fraction != 0) {
            put((byte) '.');
            digits(fraction, 6);
        }
        put(era);
    }

    private void number(long v) throws SQLException {
        if (v == Long.MIN_VALUE) {
            putAscii(Long.toString(v));
            return;
        }
        room(20);
        if (v < 0) {
            buf[at++] = '-';
            v = -v;
        }
        int start = at;
        do {
            buf[at++] = (byte) ('0' + v % 10);
            v /= 10;
        } while (v > 0);
        for (int i = start, j = at - 1; i < j; i++, j--) {
            byte t = buf[i];
            buf[i] = buf[j];
            buf[j] = t;
        }
    }

    /** `v` in exactly `width` digits, with leading zeros. */
    private void digits(long v, int width) throws SQLException {
        room(width);
        for (int i = width - 1; i >= 0; i--) {
            buf[at + i] = (byte) ('0' + v % 10);
            v /= 10;
        }
        at += width;
    }

    // -- the buffer COPY reads ------------------------------------------------------------------

    private void room(int n) throws SQLException {
        if (at + n > buf.length) {
            flush();
        }
    }

    private void flush() throws SQLException {
        if (at > 0) {
            send(buf, at);
            at = 0;
        }
    }

    private void send(byte[] bytes, int length) throws SQLException {
        try {
            copy.writeToCopy(bytes, 0, length);
        } catch (SQLException e) {
            throw refusal(e);
        }
    }

    private void put(byte b) throws SQLException {
        room(1);
        buf[at++] = b;
    }

    /** A number's text (ASCII, shorter than the buffer). */
    private void putAscii(String text) throws SQLException {
        room(text.length());
        for (int i = 0; i < text.length(); i++) {
            buf[at++] = (byte) text.charAt(i);
        }
    }

    private void put(byte[] bytes) throws SQLException {
        if (bytes.length > buf.length) {
            flush();
            send(bytes, bytes.length);
            return;
        }
        room(bytes.length);
        System.arraycopy(bytes, 0, buf, at, bytes.length);
        at += bytes.length;
    }
}

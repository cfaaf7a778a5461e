package example;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.DateTimeException;
import java.time.LocalDate;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The example jobs' fast paths in Java (order_sql.py): each takes the lines whose form
 * leaves no doubt about the verdict and gives their values, in one scan of the bytes; for
 * every other line it gives null, and the job's own rules judge it. A line of the fast
 * path is one flat JSON object of printable ASCII and nothing around it: members separated
 * by "," or ", ", a key's ":" followed by at most one space, keys of 1 to 32 of a-z and _,
 * values strings without quote or backslash, or numbers without exponent.
 */
public final class OrderLines {
    private static final int MAX_BYTES = 4096;
    private static final long MICROS_PER_DAY = 86_400_000_000L;

    private OrderLines() {
    }

    /**
     * The daily job's: fast_order(line bytes, day 'YYYY-MM-DD') is the order of a line that
     * is plainly a valid order of the day, as a struct (order_id, customer_code, cents,
     * ordered_at_micros), or null. It accepts exactly the lines that order_sql.line_pattern's
     * regular expression accepts, with the same four values, at a fifth of its time:
     * order_id, customer_id, amount and ordered_at each exactly once, in this order, other
     * members anywhere around them; order_id 1 to 200 printable ASCII characters but space,
     * quote and backslash; customer_id 'c' and 1 to 12 digits; amount at most 10 digits, no
     * leading zero, at most 2 after the point, never last; ordered_at the day, 'T', a valid
     * time of day, up to 6 digits of fraction, 'Z'. tests/core/test_order_sql.py holds both
     * forms to check_line's verdicts line by line, and to each other.
     */
    public static final class Daily implements UDF2<byte[], String, Row> {
        private static final long serialVersionUID = 1L;
        private static final String[] FIELDS = {"order_id", "customer_id", "amount", "ordered_at"};
        private static final long CUSTOMER_DIGITS = 1_000_000_000_000L;  // order_sql._DIGITS

        private transient String day;
        private transient byte[] dayBytes;
        private transient long dayMicros;

        @Override
        public Row call(byte[] line, String day) {
            if (line == null || day == null || line.length > MAX_BYTES) {
                return null;
            }
            if (!day.equals(this.day)) {
                dayMicros = LocalDate.parse(day).toEpochDay() * MICROS_PER_DAY;
                dayBytes = day.getBytes(StandardCharsets.US_ASCII);
                this.day = day;
            }
            DailyScan scan = new DailyScan(line, dayBytes, dayMicros);
            return scan.object() && scan.fields == FIELDS.length
                    ? RowFactory.create(scan.orderId, scan.customerCode, scan.cents, scan.micros) : null;
        }

        private static final class DailyScan extends Scan {
            private final byte[] day;
            private final long dayMicros;
            private int fields;  // the fields found, in their order
            private String orderId;
            private long customerCode;
            private long cents;
            private long micros;

            DailyScan(byte[] line, byte[] day, long dayMicros) {
                super(line);
                this.day = day;
                this.dayMicros = dayMicros;
            }

            @Override
            boolean member(int start, int length) {
                int field = key(start, length, FIELDS);
                if (field < 0) {
                    return other();
                }
                if (field != fields++) {
                    return false;  // out of order, or again
                }
                switch (field) {
                    case 0:
                        int from = p;
                        if (!string(1, 200, false)) {
                            return false;
                        }
                        orderId = new String(b, from + 1, p - from - 2, StandardCharsets.US_ASCII);
                        return true;
                    case 1:
                        return customerId();
                    case 2:
                        cents = amount();
                        return cents >= 0 && at() == ',';  // never last: a digit more is no plain amount
                    default:
                        if (!eat('"') || !bytes(day) || !eat('T')) {
                            return false;
                        }
                        long time = time();
                        micros = dayMicros + time;
                        return time >= 0 && eat('Z') && eat('"');
                }
            }

            /** "c" and 1 to 12 digits, quoted: coded as its digit count times 10^12 plus its digits. */
            private boolean customerId() {
                if (!eat('"') || !eat('c')) {
                    return false;
                }
                int start = p;
                long value = digits(12);
                customerCode = (p - start) * CUSTOMER_DIGITS + value;
                return value >= 0 && eat('"');
            }
        }
    }

    /**
     * The streaming job's: fast_event(record value) is a plainly valid order event as a
     * struct (customer_id, amount decimal(12,2), ordered_at_micros), or null. Valid as
     * orders_stream_totals.judged finds it (from_json, then try_cast), with the same values:
     * customer_id, amount and ordered_at each exactly once, anywhere among other members;
     * customer_id a string of 1 or more characters; amount above zero, at most 10 digits, no
     * leading zero, at most 2 after the point, a number or the same quoted; ordered_at
     * 'YYYY-MM-DDTHH:MM:SS', up to 6 digits of fraction, then 'Z' or an offset +HH:MM or
     * -HH:MM below 18 hours, a valid date from 1900 on. tests/core/test_stream_sql.py holds
     * it to the job's judging without it.
     */
    public static final class Event implements UDF1<byte[], Row> {
        private static final long serialVersionUID = 1L;
        private static final String[] FIELDS = {"customer_id", "amount", "ordered_at"};

        @Override
        public Row call(byte[] value) {
            if (value == null || value.length > MAX_BYTES) {
                return null;
            }
            EventScan scan = new EventScan(value);
            return scan.object() && scan.customerId != null && scan.cents > 0 && scan.timed
                    ? RowFactory.create(scan.customerId, BigDecimal.valueOf(scan.cents, 2), scan.micros) : null;
        }

        private static final class EventScan extends Scan {
            private String customerId;
            private long cents = -1;
            private long micros;
            private boolean timed;

            EventScan(byte[] value) {
                super(value);
            }

            @Override
            boolean member(int start, int length) {
                switch (key(start, length, FIELDS)) {
                    case 0:
                        int from = p;
                        if (customerId != null || !string(1, MAX_BYTES, true)) {
                            return false;
                        }
                        customerId = new String(b, from + 1, p - from - 2, StandardCharsets.US_ASCII);
                        return true;
                    case 1:
                        if (cents >= 0) {
                            return false;
                        }
                        boolean quoted = eat('"');
                        cents = amount();
                        return cents >= 0 && (!quoted || eat('"'));
                    case 2:
                        if (timed) {
                            return false;
                        }
                        timed = true;
                        return eat('"') && instant() && eat('"');
                    default:
                        return other();
                }
            }

            /** YYYY-MM-DDTHH:MM:SS[.ffffff] and Z or +HH:MM / -HH:MM, as micros since the epoch. */
            private boolean instant() {
                long year = fixed(4);
                long month = eat('-') ? fixed(2) : -1;
                long dayOfMonth = eat('-') ? fixed(2) : -1;
                if (year < 1900 || month < 0 || dayOfMonth < 0 || !eat('T')) {
                    return false;
                }
                long time = time();
                if (time < 0) {
                    return false;
                }
                long offset = 0;
                if (!eat('Z')) {
                    int sign = eat('+') ? 1 : eat('-') ? -1 : 0;
                    long hours = sign == 0 ? -1 : fixed(2);
                    long minutes = hours < 0 || hours > 17 || !eat(':') ? -1 : fixed(2);
                    if (minutes < 0 || minutes > 59) {
                        return false;
                    }
                    offset = sign * (hours * 60 + minutes) * 60_000_000L;
                }
                try {
                    micros = LocalDate.of((int) year, (int) month, (int) dayOfMonth).toEpochDay() * MICROS_PER_DAY
                            + time - offset;
                } catch (DateTimeException notADate) {
                    return false;
                }
                return true;
            }
        }
    }

    /** One line's scan: a position in its bytes, and the pieces of the grammar. */
    private abstract static class Scan {
        final byte[] b;
        int p;

        Scan(byte[] line) {
            this.b = line;
        }

        /** The key at b[start, start + length) was read, and its ":": read its value. */
        abstract boolean member(int start, int length);

        /** The whole line is one flat object, each member read by member(). */
        boolean object() {
            if (!eat('{')) {
                return false;
            }
            while (true) {
                if (!eat('"')) {
                    return false;
                }
                int start = p;
                while (p < b.length && (b[p] >= 'a' && b[p] <= 'z' || b[p] == '_')) {
                    p++;
                }
                int length = p - start;
                if (length < 1 || length > 32 || !eat('"') || !eat(':')) {
                    return false;
                }
                eat(' ');
                if (!member(start, length)) {
                    return false;
                }
                if (eat(',')) {
                    eat(' ');
                } else {
                    return eat('}') && p == b.length;
                }
            }
        }

        int at() {
            return p < b.length ? b[p] : -1;
        }

        boolean eat(int c) {
            if (p < b.length && b[p] == c) {
                p++;
                return true;
            }
            return false;
        }

        boolean bytes(byte[] expected) {
            for (byte c : expected) {
                if (!eat(c)) {
                    return false;
                }
            }
            return true;
        }

        boolean digit() {
            return p < b.length && b[p] >= '0' && b[p] <= '9';
        }

        /** Up to `most` digits (at least one) as a number; -1 when there is none. */
        long digits(int most) {
            long value = 0;
            int n = 0;
            for (; n < most && digit(); n++) {
                value = value * 10 + (b[p++] - '0');
            }
            return n == 0 ? -1 : value;
        }

        /** Exactly `count` digits as a number, or -1. */
        long fixed(int count) {
            int start = p;
            long value = digits(count);
            return p - start == count ? value : -1;
        }

        /** After a point, 1 to `most` digits as a number of 10^-most (".5" of 2: 50); 0 without
         *  a point; -1 for a point without a digit. */
        long fraction(int most) {
            if (!eat('.')) {
                return 0;
            }
            int start = p;
            long value = digits(most);
            for (int n = p - start; value >= 0 && n < most; n++) {
                value *= 10;
            }
            return value;
        }

        /** The number of the name in `names` that is the key at b[start, start + length), or -1. */
        int key(int start, int length, String[] names) {
            for (int i = 0; i < names.length; i++) {
                String name = names[i];
                int j = 0;
                while (j < length && j < name.length() && b[start + j] == name.charAt(j)) {
                    j++;
                }
                if (j == length && j == name.length()) {
                    return i;
                }
            }
            return -1;
        }

        /** A quoted string of `least` to `most` printable ASCII characters but quote and
         *  backslash (and space, unless `spaces`). */
        boolean string(int least, int most, boolean spaces) {
            if (!eat('"')) {
                return false;
            }
            int start = p;
            while (p < b.length && b[p] != '"') {
                if (b[p] < (spaces ? 0x20 : 0x21) || b[p] > 0x7e || b[p] == '\\') {
                    return false;
                }
                p++;
            }
            int length = p - start;
            return length >= least && length <= most && eat('"');
        }

        /** An amount in cents: 0, or up to 10 digits without a leading zero, then up to 2
         *  after a point; -1 when it is not one. */
        long amount() {
            long whole = eat('0') ? 0 : digit() ? digits(10) : -1;
            long fraction = whole < 0 ? -1 : fraction(2);
            return fraction < 0 ? -1 : whole * 100 + fraction;
        }

        /** HH:MM:SS of a valid time of day and up to 6 digits of fraction, as micros; -1 when not. */
        long time() {
            long hours = fixed(2);
            long minutes = hours < 0 || hours > 23 || !eat(':') ? -1 : fixed(2);
            long seconds = minutes < 0 || minutes > 59 || !eat(':') ? -1 : fixed(2);
            long fraction = seconds < 0 || seconds > 59 ? -1 : fraction(6);
            return fraction < 0 ? -1 : ((hours * 60 + minutes) * 60 + seconds) * 1_000_000L + fraction;
        }

        /** Another key's value: a string (string(0, ..., true)) or a number without exponent
         *  (an optional minus, 0 or digits without a leading zero, an optional point and digits). */
        boolean other() {
            if (at() == '"') {
                return string(0, Integer.MAX_VALUE, true);
            }
            eat('-');
            if (!eat('0')) {
                if (!digit()) {
                    return false;
                }
                digits(Integer.MAX_VALUE);
            }
            return !eat('.') || digits(Integer.MAX_VALUE) >= 0;
        }
    }
}

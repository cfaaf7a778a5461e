package example;

import java.nio.charset.StandardCharsets;
import java.time.LocalDate;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The example's fast path (order_sql.py) in Java: fast_order(line bytes, day 'YYYY-MM-DD')
 * is the order of a line that is plainly a valid order of the day, as a struct (order_id,
 * customer_code, cents, ordered_at_micros), or null for every other line (order_rules then
 * judges it in Python).
 *
 * It accepts exactly the lines that order_sql.line_pattern's regular expression accepts,
 * and gives the same four values; one scan of the bytes, without a regular expression,
 * takes a fifth of its time. The grammar, as there: at most 4096 bytes; one flat JSON
 * object and nothing around it; members separated by "," or ", ", a key's ":" followed by
 * at most one space; order_id, customer_id, amount and ordered_at each exactly once, in
 * this order; any other key of 1 to 32 of a-z and _, whose value is a string of printable
 * ASCII without quote or backslash or a number without exponent; order_id 1 to 200
 * printable ASCII characters but space, quote and backslash; customer_id 'c' and 1 to 12
 * digits; amount at most 10 digits, no leading zero, at most 2 after the point, never
 * last; ordered_at the day, 'T', a valid time of day, up to 6 digits of fraction, 'Z'.
 * tests/core/test_order_sql.py holds both to check_line's verdicts line by line.
 */
public final class FastOrder implements UDF2<byte[], String, Row> {
    private static final long serialVersionUID = 1L;
    private static final int MAX_BYTES = 4096;
    private static final String[] FIELDS = {"order_id", "customer_id", "amount", "ordered_at"};
    private static final long MICROS_PER_DAY = 86_400_000_000L;
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
        return new Scan(line, dayBytes, dayMicros).order();
    }

    /** One line's scan: a position in its bytes, and the values found so far. */
    private static final class Scan {
        private final byte[] b;
        private final byte[] day;
        private final long dayMicros;
        private int p;
        private String orderId;
        private long customerCode;
        private long cents;
        private long micros;

        Scan(byte[] line, byte[] day, long dayMicros) {
            this.b = line;
            this.day = day;
            this.dayMicros = dayMicros;
        }

        /** The order, or null: the members in turn, each followed by a separator or the end. */
        Row order() {
            if (!eat('{')) {
                return null;
            }
            int fields = 0;  // the fields found, in their order
            while (true) {
                if (!eat('"')) {
                    return null;
                }
                int start = p;
                while (p < b.length && (b[p] >= 'a' && b[p] <= 'z' || b[p] == '_')) {
                    p++;
                }
                int length = p - start;
                if (!eat('"') || !eat(':')) {
                    return null;
                }
                eat(' ');
                int field = field(start, length);
                if (field >= 0) {
                    if (field != fields || !value(field)) {
                        return null;  // out of order, again, or not in the field's plain form
                    }
                    fields++;
                } else if (length < 1 || length > 32 || !other()) {
                    return null;
                }
                if (eat(',')) {
                    eat(' ');
                } else if (eat('}') && p == b.length && fields == FIELDS.length) {
                    return RowFactory.create(orderId, customerCode, cents, micros);
                } else {
                    return null;
                }
            }
        }

        private boolean eat(int c) {
            if (p < b.length && b[p] == c) {
                p++;
                return true;
            }
            return false;
        }

        private boolean digit() {
            return p < b.length && b[p] >= '0' && b[p] <= '9';
        }

        /** Up to `most` digits (at least one) as a number; -1 when there is none. */
        private long digits(int most) {
            long value = 0;
            int n = 0;
            for (; n < most && digit(); n++) {
                value = value * 10 + (b[p++] - '0');
            }
            return n == 0 ? -1 : value;
        }

        /** After a point, 1 to `most` digits as a number of 10^-most (".5" of 2: 50); 0 without
         *  a point; -1 for a point without a digit. */
        private long fraction(int most) {
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

        /** The number of the field whose name is the key at b[start, start + length), or -1. */
        private int field(int start, int length) {
            for (int i = 0; i < FIELDS.length; i++) {
                String name = FIELDS[i];
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

        private boolean value(int field) {
            switch (field) {
                case 0:
                    return orderId();
                case 1:
                    return customerId();
                case 2:
                    return amount();
                default:
                    return orderedAt();
            }
        }

        /** Printable ASCII but space, quote and backslash, 1 to 200 characters, quoted. */
        private boolean orderId() {
            if (!eat('"')) {
                return false;
            }
            int start = p;
            while (p < b.length && b[p] != '"') {
                if (b[p] < 0x21 || b[p] > 0x7e || b[p] == '\\') {
                    return false;
                }
                p++;
            }
            int length = p - start;
            if (length < 1 || length > 200 || !eat('"')) {
                return false;
            }
            orderId = new String(b, start, length, StandardCharsets.US_ASCII);
            return true;
        }

        /** "c" and 1 to 12 digits, quoted: coded as its digit count times 10^12 plus its digits. */
        private boolean customerId() {
            if (!eat('"') || !eat('c')) {
                return false;
            }
            int start = p;
            long value = digits(12);
            if (value < 0 || !eat('"')) {
                return false;
            }
            customerCode = (p - 1 - start) * CUSTOMER_DIGITS + value;
            return true;
        }

        /** 0 or up to 10 digits without a leading zero, then up to 2 after a point; a member follows. */
        private boolean amount() {
            long whole;
            if (eat('0')) {
                whole = 0;
            } else if (digit()) {
                whole = digits(10);
            } else {
                return false;
            }
            long fraction = fraction(2);
            cents = whole * 100 + fraction;
            return fraction >= 0 && p < b.length && b[p] == ',';  // the next byte decides: a digit more is no plain amount
        }

        /** The day, "T", HH:MM:SS of a valid time, up to 6 digits of fraction, "Z", quoted. */
        private boolean orderedAt() {
            if (!eat('"')) {
                return false;
            }
            for (byte c : day) {
                if (!eat(c)) {
                    return false;
                }
            }
            if (!eat('T')) {
                return false;
            }
            long hours = two(23);
            long minutes = hours < 0 || !eat(':') ? -1 : two(59);
            long seconds = minutes < 0 || !eat(':') ? -1 : two(59);
            if (seconds < 0) {
                return false;
            }
            long fraction = fraction(6);
            if (fraction < 0 || !eat('Z') || !eat('"')) {
                return false;
            }
            micros = dayMicros + ((hours * 60 + minutes) * 60 + seconds) * 1_000_000L + fraction;
            return true;
        }

        /** Two digits of a number from 0 to `most`, or -1. */
        private long two(int most) {
            int start = p;
            long value = digits(2);
            return p - start == 2 && value <= most ? value : -1;
        }

        /** Another key's value: a quoted string of printable ASCII without quote or backslash,
         *  or a number without exponent (an optional minus, 0 or digits without a leading
         *  zero, an optional point and digits). */
        private boolean other() {
            if (eat('"')) {
                while (p < b.length && b[p] != '"') {
                    if (b[p] < 0x20 || b[p] > 0x7e || b[p] == '\\') {
                        return false;
                    }
                    p++;
                }
                return eat('"');
            }
            eat('-');
            if (!eat('0')) {
                if (!digit()) {
                    return false;
                }
                digits(Integer.MAX_VALUE);
            }
            if (eat('.')) {
                return digits(Integer.MAX_VALUE) >= 0;
            }
            return true;
        }
    }
}

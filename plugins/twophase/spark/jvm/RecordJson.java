package twophase;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneId;
import java.time.zone.ZoneRules;
import java.util.Arrays;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A Kafka record's value made from Spark's row as KafkaParticipant.stage's expression
 * `to_json(struct(columns))` makes it, byte for byte, at a fraction of its cost: Spark formats
 * each timestamp with java.time's formatter and writes through Jackson into characters it
 * then encodes again; for the 17 columns of the bench's wide rows that took 1.7 s of a 6.2 s
 * staging pass of 1M rows (2 cores). What to_json writes, and so this:
 *
 * - one object, fields in the columns' order, no spaces; a null field is left out, unless
 *   nulls are kept (the target declares a schema, or spark.sql.jsonGenerator.ignoreNullFields
 *   is false): then it is null;
 * - names and strings in quotes, with \" \\ \b \t \n \f \r, other characters below U+0020
 *   as backslash-u00XX (upper-case hex), every other character as UTF-8; text that is not
 *   UTF-8 decoded as Java decodes it (U+FFFD for a bad sequence);
 * - integers in decimal; true, false; floats and doubles as Java's toString writes them,
 *   but NaN and the infinities, which are strings ("NaN", "Infinity", "-Infinity");
 * - decimals as BigDecimal.toString (plain, or in E notation when below 10^-6 of their unit);
 * - dates as yyyy-MM-dd; timestamps as yyyy-MM-dd'T'HH:mm:ss.SSS (milliseconds truncated)
 *   and their offset in the session's time zone (Z, +HH:MM or +HH:MM:SS); a year after 9999
 *   is written with a + before it, a year before 0 with a - and at least four digits.
 *
 * tests/core/test_record_json.py holds it to Spark's to_json, value for value.
 *
 * Spec (KafkaWriter.jvm_spec): json.columns (the row's ordinals), json.names (each name's
 * UTF-8, in hex), json.types (string, byte, short, int, long, boolean, float, double, date,
 * timestamp or decimal:P:S), json.nulls ("keep", or "session": as the session says); and
 * from StagePass: session.zone, session.ignore_null_fields.
 */
final class RecordJson {
    private static final byte[] NULL = ascii("null"), TRUE = ascii("true"), FALSE = ascii("false");
    private static final byte[][] ESCAPES = new byte[128][];  // per ASCII character, its escape; null: none

    static {
        String hex = "0123456789ABCDEF";
        for (int c = 0; c < 0x20; c++) {
            ESCAPES[c] = ascii("\\u00" + hex.charAt(c >> 4) + hex.charAt(c & 15));
        }
        ESCAPES['"'] = ascii("\\\"");
        ESCAPES['\\'] = ascii("\\\\");
        ESCAPES['\b'] = ascii("\\b");
        ESCAPES['\t'] = ascii("\\t");
        ESCAPES['\n'] = ascii("\\n");
        ESCAPES['\f'] = ascii("\\f");
        ESCAPES['\r'] = ascii("\\r");
    }

    private final ColumnTypes columns;
    private final byte[][] names;  // each field's "name":
    private final boolean keepNulls;
    private final ZoneRules zone;
    private final Integer fixedOffset;  // seconds east of UTC, when the zone has one offset
    private final CivilDate calendar = new CivilDate();
    private byte[] buf = new byte[512];
    private int at;

    RecordJson(Map<String, String> spec) {
        columns = new ColumnTypes(spec.get("json.columns"), spec.get("json.types"));
        String[] hexNames = spec.get("json.names").split(",", -1);
        names = new byte[columns.size()][];
        for (int i = 0; i < columns.size(); i++) {
            byte[] name = quoted(new String(StagePass.hex(hexNames[i]), StandardCharsets.UTF_8));
            names[i] = Arrays.copyOf(name, name.length + 1);
            names[i][name.length] = ':';
        }
        keepNulls = spec.get("json.nulls").equals("keep")
                || !Boolean.parseBoolean(spec.get("session.ignore_null_fields"));
        zone = ZoneId.of(spec.get("session.zone")).getRules();
        fixedOffset = zone.isFixedOffset() ? zone.getOffset(Instant.EPOCH).getTotalSeconds() : null;
    }

    /** The value of `row`'s record. */
    byte[] value(InternalRow row) {
        at = 0;
        put('{');
        boolean first = true;
        for (int i = 0; i < columns.size(); i++) {
            boolean isNull = row.isNullAt(columns.ordinal[i]);
            if (isNull && !keepNulls) {
                continue;
            }
            if (!first) {
                put(',');
            }
            first = false;
            put(names[i]);
            if (isNull) {
                put(NULL);
            } else {
                field(row, columns.ordinal[i], i);
            }
        }
        put('}');
        return Arrays.copyOf(buf, at);
    }

    private void field(InternalRow row, int ordinal, int i) {
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
                real(Float.toString(row.getFloat(ordinal)));
                break;
            case ColumnTypes.DOUBLE:
                real(Double.toString(row.getDouble(ordinal)));
                break;
            case ColumnTypes.DECIMAL:
                decimal(row.getDecimal(ordinal, columns.precision[i], columns.scale[i]));
                break;
            case ColumnTypes.DATE:
                put('"');
                date(row.getInt(ordinal));
                put('"');
                break;
            case ColumnTypes.TIMESTAMP:
                timestamp(row.getLong(ordinal));
                break;
            default:
                throw new IllegalArgumentException("no JSON form of type " + columns.type[i]);
        }
    }

    /** A string: ASCII as it is, but for its escapes; other text as Java decodes and encodes it. */
    private void string(UTF8String s) {
        byte[] bytes = s.getBytes();
        for (byte b : bytes) {
            if (b < 0) {
                put(quoted(s.toString()));
                return;
            }
        }
        room(bytes.length * 6 + 2);
        buf[at++] = '"';
        for (byte b : bytes) {
            byte[] escape = ESCAPES[b];
            if (escape == null) {
                buf[at++] = b;
            } else {
                System.arraycopy(escape, 0, buf, at, escape.length);
                at += escape.length;
            }
        }
        buf[at++] = '"';
    }

    /** `text` in quotes, escaped, as UTF-8 (a lone surrogate as ?, as String.getBytes writes it). */
    private static byte[] quoted(String text) {
        StringBuilder out = new StringBuilder(text.length() + 8).append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c < 128 && ESCAPES[c] != null) {
                out.append(new String(ESCAPES[c], StandardCharsets.US_ASCII));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString().getBytes(StandardCharsets.UTF_8);
    }

    /** A float or double as Java writes it; NaN and the infinities (no digit at their end) as strings. */
    private void real(String text) {
        boolean finite = Character.isDigit(text.charAt(text.length() - 1));
        if (!finite) {
            put('"');
        }
        putAscii(text);
        if (!finite) {
            put('"');
        }
    }

    /** BigDecimal.toString of the value: plainly where its exponent, less one per digit, is at least -6. */
    private void decimal(Decimal d) {
        int scale = d.scale();
        if (d.precision() <= 18 && scale >= 0) {
            long unscaled = d.toUnscaledLong();
            long magnitude = Math.abs(unscaled);
            if (width(magnitude) - 1 - scale >= -6) {
                if (unscaled < 0) {
                    put('-');
                }
                long unit = 1;
                for (int i = 0; i < scale; i++) {
                    unit *= 10;
                }
                number(magnitude / unit);
                if (scale > 0) {
                    put('.');
                    digits(magnitude % unit, scale);
                }
                return;
            }
        }
        putAscii(d.toJavaBigDecimal().toString());
    }

    private void date(long days) {
        long date = calendar.of(days);
        long year = CivilDate.year(date);
        if (year > 9999) {
            put('+');
            number(year);
        } else if (year < 0) {
            put('-');
            if (year < -9999) {
                number(-year);
            } else {
                digits(-year, 4);
            }
        } else {
            digits(year, 4);
        }
        put('-');
        digits(CivilDate.month(date), 2);
        put('-');
        digits(CivilDate.day(date), 2);
    }

    private void timestamp(long micros) {
        long seconds = Math.floorDiv(micros, 1_000_000L);
        int offset = fixedOffset != null ? fixedOffset
                : zone.getOffset(Instant.ofEpochSecond(seconds)).getTotalSeconds();
        long local = seconds + offset;
        long ofDay = Math.floorMod(local, 86400L);
        put('"');
        date(Math.floorDiv(local, 86400L));
        put('T');
        digits(ofDay / 3600, 2);
        put(':');
        digits(ofDay / 60 % 60, 2);
        put(':');
        digits(ofDay % 60, 2);
        put('.');
        digits(Math.floorMod(micros, 1_000_000L) / 1000, 3);
        if (offset == 0) {
            put('Z');
        } else {
            put(offset < 0 ? '-' : '+');
            int east = Math.abs(offset);
            digits(east / 3600, 2);
            put(':');
            digits(east / 60 % 60, 2);
            if (east % 60 != 0) {
                put(':');
                digits(east % 60, 2);
            }
        }
        put('"');
    }

    private void number(long v) {
        if (v == Long.MIN_VALUE) {
            putAscii(Long.toString(v));
            return;
        }
        if (v < 0) {
            put('-');
            v = -v;
        }
        digits(v, width(v));
    }

    /** How many digits `v` (at least 0) has. */
    private static int width(long v) {
        int width = 1;
        for (; v >= 10; v /= 10) {
            width++;
        }
        return width;
    }

    /** `v` (at least 0) in exactly `width` digits, with leading zeros. */
    private void digits(long v, int width) {
        room(width);
        for (int i = width - 1; i >= 0; i--) {
            buf[at + i] = (byte) ('0' + v % 10);
            v /= 10;
        }
        at += width;
    }

    private void room(int n) {
        if (at + n > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(2 * buf.length, at + n));
        }
    }

    private void put(char c) {
        room(1);
        buf[at++] = (byte) c;
    }

    private void put(byte[] bytes) {
        room(bytes.length);
        System.arraycopy(bytes, 0, buf, at, bytes.length);
        at += bytes.length;
    }

    private void putAscii(String text) {
        room(text.length());
        for (int i = 0; i < text.length(); i++) {
            buf[at++] = (byte) text.charAt(i);
        }
    }

    private static byte[] ascii(String text) {
        return text.getBytes(StandardCharsets.US_ASCII);
    }
}

package twophase;

import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The schema readers' fast path (twophase/spark/readers.py): a line's fields as text, in
 * one scan of its bytes, for the lines whose form leaves no doubt about what Spark's own
 * parser (from_csv, from_json) would make of them; null for every other line, which Spark's
 * parser then reads. Each gives an array of the schema's n fields (null: absent or empty)
 * and an (n + 1)-th element, non-null when the line did not have exactly n fields (CSV
 * only: from_csv's corrupt-record column). tests/core/test_line_fields.py holds both to
 * Spark's parsers, line by line, on hostile lines and random edits of plain ones.
 */
public final class LineFields {
    /** Longer lines are left to Spark's parser (Jackson's limits on a number's length and
     *  a document's nesting are far above what this path takes). */
    private static final int MAX_BYTES = 1 << 20;
    private static final int MAX_DEPTH = 32;
    private static final int MAX_NUMBER = 100;

    private LineFields() {
    }

    /**
     * csv_fields(line bytes, separator, n): the fields of a line split on a one-character
     * ASCII separator, when the line has no quote, no backslash, no control character but
     * tab, and is valid UTF-8. from_csv (its defaults: no trimming, "" read as null) splits
     * such a line at every separator, so its fields are the same.
     */
    public static final class Csv implements UDF3<byte[], String, Integer, UTF8String[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public UTF8String[] call(byte[] line, String sep, Integer n) {
            if (line == null || line.length == 0 || line.length > MAX_BYTES || sep == null || sep.length() != 1
                    || n == null || n < 1) {
                return null;
            }
            char s = sep.charAt(0);
            if (s > 0x7e || s == '"' || s == '\\' || s < 0x20 && s != '\t') {
                return null;
            }
            UTF8String[] fields = new UTF8String[n + 1];
            int count = 0;
            int start = 0;
            boolean ascii = true;
            for (int i = 0; i <= line.length; i++) {
                byte c = i < line.length ? line[i] : (byte) s;
                if (c == s) {
                    if (count < n && i > start) {
                        fields[count] = UTF8String.fromBytes(line, start, i - start);
                    }
                    count++;
                    start = i + 1;
                } else if (c == '"' || c == '\\' || c >= 0 && c < 0x20 && c != '\t') {
                    return null;
                } else if (c < 0) {
                    ascii = false;
                }
            }
            if (!ascii && !Utf8.valid(line, 0, line.length)) {
                return null;
            }
            fields[n] = count == n ? null : UTF8String.EMPTY_UTF8;
            return fields;
        }
    }

    /**
     * json_fields(line bytes, names joined by NUL): the named members' values as from_json
     * reads them into string fields, when the line is one JSON object and nothing but white
     * space around it, valid UTF-8, and each named member appears at most once with a string
     * value (escapes but for a surrogate's), an integer of at most 18 digits (not -0), true,
     * false or null. Other members may hold any JSON value but a number from_json reads
     * leniently (NaN, Infinity, leading zeros) or a string in single quotes: those lines are
     * from_json's. The names match keys exactly (case and all), as from_json matches them.
     */
    public static final class Json implements UDF2<byte[], String, UTF8String[]> {
        private static final long serialVersionUID = 1L;

        private transient String joined;
        private transient byte[][] names;

        @Override
        public UTF8String[] call(byte[] line, String joinedNames) {
            if (line == null || joinedNames == null || line.length > MAX_BYTES) {
                return null;
            }
            if (!joinedNames.equals(joined)) {
                String[] split = joinedNames.split("\u0000", -1);
                names = new byte[split.length][];
                for (int i = 0; i < split.length; i++) {
                    names[i] = split[i].getBytes(StandardCharsets.UTF_8);
                }
                joined = joinedNames;
            }
            if (!Utf8.valid(line, 0, line.length)) {
                return null;
            }
            JsonScan scan = new JsonScan(line, names);
            return scan.object() ? scan.values : null;
        }
    }

    /** One JSON line's scan: a position in its bytes, the values of the named members. */
    private static final class JsonScan {
        private static final UTF8String FAILED = UTF8String.fromString("not read");  // compared by identity
        private static final UTF8String TRUE = UTF8String.fromString("true");
        private static final UTF8String FALSE = UTF8String.fromString("false");

        private final byte[] b;
        private final byte[][] names;
        private final UTF8String[] values;
        private final boolean[] seen;
        private int p;

        JsonScan(byte[] line, byte[][] names) {
            this.b = line;
            this.names = names;
            this.values = new UTF8String[names.length + 1];
            this.seen = new boolean[names.length];
        }

        /** The whole line is one object; values holds its named members'. */
        boolean object() {
            space();
            if (!eat('{')) {
                return false;
            }
            space();
            if (!eat('}')) {
                do {
                    space();
                    int start = p + 1;
                    if (!string(false)) {
                        return false;
                    }
                    int name = name(start, p - 1);
                    space();
                    if (!eat(':')) {
                        return false;
                    }
                    space();
                    if (name < 0) {
                        if (!skip(0)) {
                            return false;
                        }
                    } else {
                        if (seen[name]) {
                            return false;  // from_json keeps the last; left to it
                        }
                        seen[name] = true;
                        UTF8String value = value();
                        if (value == FAILED) {
                            return false;
                        }
                        values[name] = value;
                    }
                    space();
                } while (eat(','));
                if (!eat('}')) {
                    return false;
                }
            }
            space();
            return p == b.length;
        }

        /** The number of the name that is the key at b[start, end) (a key without escapes), or -1. */
        private int name(int start, int end) {
            for (int i = 0; i < names.length; i++) {
                byte[] name = names[i];
                if (name.length == end - start) {
                    int j = 0;
                    while (j < name.length && name[j] == b[start + j]) {
                        j++;
                    }
                    if (j == name.length) {
                        return i;
                    }
                }
            }
            return -1;
        }

        /** A named member's value as from_json gives it as text, or FAILED. */
        private UTF8String value() {
            int start = p;
            int c = at();
            if (c == '"') {
                return string(true) ? text(start + 1, p - 1) : FAILED;
            }
            if (word("null")) {
                return null;
            }
            if (word("true")) {
                return TRUE;
            }
            if (word("false")) {
                return FALSE;
            }
            eat('-');
            int digits = p;
            if (eat('0')) {
                if (p - start == 2) {
                    return FAILED;  // -0: from_json gives 0
                }
            } else {
                while (digit()) {
                    p++;
                }
            }
            int count = p - digits;
            if (count == 0 || count > 18 || at() == '.' || at() == 'e' || at() == 'E') {
                return FAILED;  // from_json gives a fraction or an exponent as its double's text
            }
            return UTF8String.fromBytes(b, start, p - start);
        }

        /** Any JSON value, read past; false where it is none (or is one from_json reads leniently). */
        private boolean skip(int depth) {
            int c = at();
            if (c == '"') {
                return string(true);
            }
            if (c == '{' || c == '[') {
                if (depth >= MAX_DEPTH) {
                    return false;
                }
                p++;
                int close = c == '{' ? '}' : ']';
                space();
                if (eat(close)) {
                    return true;
                }
                do {
                    space();
                    if (c == '{') {
                        if (!string(false)) {
                            return false;
                        }
                        space();
                        if (!eat(':')) {
                            return false;
                        }
                        space();
                    }
                    if (!skip(depth + 1)) {
                        return false;
                    }
                    space();
                } while (eat(','));
                return eat(close);
            }
            return word("null") || word("true") || word("false") || number();
        }

        /** A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, at most MAX_NUMBER characters. */
        private boolean number() {
            int start = p;
            eat('-');
            if (!eat('0')) {
                if (!digit()) {
                    return false;
                }
                while (digit()) {
                    p++;
                }
            }
            if (eat('.') && !digits()) {
                return false;
            }
            if (eat('e') || eat('E')) {
                if (!eat('+')) {
                    eat('-');
                }
                if (!digits()) {
                    return false;
                }
            }
            return p - start <= MAX_NUMBER && !digit();
        }

        private boolean digits() {
            if (!digit()) {
                return false;
            }
            while (digit()) {
                p++;
            }
            return true;
        }

        /** A quoted string, read past: no control character, escapes only of JSON's
         *  (with `escapes`; none without), none of a surrogate. */
        private boolean string(boolean escapes) {
            if (!eat('"')) {
                return false;
            }
            while (p < b.length) {
                byte c = b[p++];
                if (c == '"') {
                    return true;
                }
                if (c >= 0 && c < 0x20) {
                    return false;
                }
                if (c == '\\') {
                    if (!escapes || p >= b.length) {
                        return false;
                    }
                    byte e = b[p++];
                    if (e == 'u') {
                        int code = hex4();
                        if (code < 0 || code >= 0xd800 && code <= 0xdfff) {
                            return false;
                        }
                    } else if ("\"\\/bfnrt".indexOf(e) < 0) {
                        return false;
                    }
                }
            }
            return false;
        }

        /** The text of a string's content b[start, end), read by string(true): its escapes undone. */
        private UTF8String text(int start, int end) {
            int i = start;
            while (i < end && b[i] != '\\') {
                i++;
            }
            if (i == end) {
                return UTF8String.fromBytes(b, start, end - start);
            }
            StringBuilder out = new StringBuilder(end - start);
            int run = start;
            while (true) {
                while (i < end && b[i] != '\\') {
                    i++;
                }
                out.append(new String(b, run, i - run, StandardCharsets.UTF_8));
                if (i == end) {
                    break;
                }
                byte e = b[i + 1];
                i += 2;
                switch (e) {
                    case 'b': out.append('\b'); break;
                    case 'f': out.append('\f'); break;
                    case 'n': out.append('\n'); break;
                    case 'r': out.append('\r'); break;
                    case 't': out.append('\t'); break;
                    case 'u':
                        out.append((char) Integer.parseInt(new String(b, i, 4, StandardCharsets.US_ASCII), 16));
                        i += 4;
                        break;
                    default: out.append((char) e);  // " \ /
                }
                run = i;
            }
            return UTF8String.fromString(out.toString());
        }

        private int hex4() {
            if (p + 4 > b.length) {
                return -1;
            }
            int code = 0;
            for (int i = 0; i < 4; i++) {
                int d = Character.digit(b[p++], 16);
                if (d < 0) {
                    return -1;
                }
                code = code * 16 + d;
            }
            return code;
        }

        private boolean word(String w) {
            if (p + w.length() > b.length) {
                return false;
            }
            for (int i = 0; i < w.length(); i++) {
                if (b[p + i] != w.charAt(i)) {
                    return false;
                }
            }
            p += w.length();  // what follows is the caller's to check: a delimiter, or the line is not read
            return true;
        }

        private int at() {
            return p < b.length ? b[p] : -1;
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

        /** JSON's white space (a line holds no line break). */
        private void space() {
            while (p < b.length && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r')) {
                p++;
            }
        }
    }

    /** Strict UTF-8: no overlong form, no surrogate, nothing above U+10FFFF. */
    private static final class Utf8 {
        private Utf8() {
        }

        static boolean valid(byte[] b, int from, int to) {
            int i = from;
            while (i < to) {
                int c = b[i++] & 0xff;
                if (c < 0x80) {
                    continue;
                }
                int more;
                int least;
                if (c >= 0xc2 && c <= 0xdf) {
                    more = 1;
                    least = 0x80;
                } else if (c >= 0xe0 && c <= 0xef) {
                    more = 2;
                    least = 0x800;
                } else if (c >= 0xf0 && c <= 0xf4) {
                    more = 3;
                    least = 0x10000;
                } else {
                    return false;
                }
                if (i + more > to) {
                    return false;
                }
                int code = c & (0x3f >> more);
                for (int k = 0; k < more; k++) {
                    int d = b[i++] & 0xff;
                    if ((d & 0xc0) != 0x80) {
                        return false;
                    }
                    code = code << 6 | d & 0x3f;
                }
                if (code < least || code > 0x10ffff || code >= 0xd800 && code <= 0xdfff) {
                    return false;
                }
            }
            return true;
        }
    }
}

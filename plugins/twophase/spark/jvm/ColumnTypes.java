package twophase;

import java.util.Arrays;
import java.util.List;

/**
 * The columns a writer reads and their types, as its spec names them (two comma-separated
 * lists: the row's ordinals, and per column string, byte, short, int, long, boolean, float,
 * double, date, timestamp or decimal:P:S: participants/contract.py's jvm_type), parsed once
 * into numbers a writer's switch reads for every value.
 */
final class ColumnTypes {
    static final int STRING = 0, BYTE = 1, SHORT = 2, INT = 3, LONG = 4, BOOLEAN = 5, FLOAT = 6, DOUBLE = 7,
            DATE = 8, TIMESTAMP = 9, DECIMAL = 10;
    private static final List<String> NAMES = Arrays.asList(
            "string", "byte", "short", "int", "long", "boolean", "float", "double", "date", "timestamp");

    final int[] ordinal, type, precision, scale;

    ColumnTypes(String ordinals, String types) {
        String[] columns = ordinals.split(","), names = types.split(",");
        int n = columns.length;
        ordinal = new int[n];
        type = new int[n];
        precision = new int[n];
        scale = new int[n];
        for (int i = 0; i < n; i++) {
            ordinal[i] = Integer.parseInt(columns[i]);
            if (names[i].startsWith("decimal:")) {
                String[] ps = names[i].split(":");
                type[i] = DECIMAL;
                precision[i] = Integer.parseInt(ps[1]);
                scale[i] = Integer.parseInt(ps[2]);
            } else {
                type[i] = NAMES.indexOf(names[i]);
                if (type[i] < 0) {
                    throw new IllegalArgumentException("no JVM writer writes type " + names[i]);
                }
            }
        }
    }

    int size() {
        return ordinal.length;
    }
}

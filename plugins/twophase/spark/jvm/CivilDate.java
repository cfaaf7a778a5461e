package twophase;

/**
 * The calendar date of a day count since 1970-01-01, in the proleptic Gregorian calendar
 * (Spark's and java.time's), without allocating: the writers format dates and timestamps
 * of millions of rows (StagingCopy's CSV, RecordJson's JSON). Year 0 is 1 BC. One per
 * writer: it keeps the last day it was asked, as neighbouring rows often share their day.
 */
final class CivilDate {
    private long lastDays = Long.MIN_VALUE, lastDate;

    /** The date of `days`, packed: year() month() day() read it back. */
    long of(long days) {
        if (days != lastDays) {
            lastDate = compute(days);
            lastDays = days;
        }
        return lastDate;
    }

    private static long compute(long days) {
        long z = days + 719468L;
        long cycle = Math.floorDiv(z, 146097L);
        long dayOfCycle = z - cycle * 146097L;
        long yearOfCycle = (dayOfCycle - dayOfCycle / 1460 + dayOfCycle / 36524 - dayOfCycle / 146096) / 365;
        long dayOfYear = dayOfCycle - (365 * yearOfCycle + yearOfCycle / 4 - yearOfCycle / 100);
        long shifted = (5 * dayOfYear + 2) / 153;
        long day = dayOfYear - (153 * shifted + 2) / 5 + 1;
        long month = shifted < 10 ? shifted + 3 : shifted - 9;
        long year = yearOfCycle + cycle * 400 + (month <= 2 ? 1 : 0);
        return year << 9 | month << 5 | day;
    }

    static long year(long date) {
        return date >> 9;
    }

    static int month(long date) {
        return (int) (date >> 5 & 15);
    }

    static int day(long date) {
        return (int) (date & 31);
    }
}

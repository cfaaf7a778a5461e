"""python -m orders_sample --landing DIR --date 2026-11-20 --lines 100000 [--bad-share 0.01]"""

from __future__ import annotations

import argparse
import re
import time
from datetime import date

from twophase.spark.storage import StorageURIError, local_path

from .generate import generate


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m orders_sample", description=__doc__)
    parser.add_argument("--landing", required=True, help="landing folder, a local path or a file:// URI; the day "
                                                          "goes to <landing>/date=<date>")
    parser.add_argument("--date", required=True, type=date.fromisoformat, help="the day, YYYY-MM-DD")
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--bad-share", type=float, default=0.01, help="share of bad lines, 0..1 (default 0.01)")
    parser.add_argument("--customers", type=int, default=None, help="distinct customers (default lines/20)")
    args = parser.parse_args()
    landing = args.landing
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", landing):  # a URI ($ORDERS_DATA/landing): local ones only
        try:
            landing = local_path(landing, "--landing")
        except StorageURIError as exc:
            parser.error(str(exc))
    started = time.monotonic()
    made = generate(landing, args.date, args.lines, args.bad_share, args.customers)
    print(f"orders_sample: {made.lines} lines ({made.bad_lines} bad) in {made.files} files at {made.folder}, "
          f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()

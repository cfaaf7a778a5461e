"""What operators run (`python -m twophase`, the recovery DAG): recovery of loads whose
driver is gone, verify of what readers see against the log, the status report, and the
command line over all three."""

"""The Spark side of prepare: the frame every prepare job runs in (job.run), the staging
pass that writes a job's frames to every target from the executors (stage), the check that
the executors can import what the writers need, and the storage URIs a job reads and
writes."""

"""The two-phase commit itself: the coordinator's steps (begin, prepare, audit, vote,
commit, rollback), the one driver of a decided load (lease), the states and their
transitions, the votes and the checks of every claim a participant makes (voting), and
the typed outcome of a participant's step. docs/protocol.md tells it."""

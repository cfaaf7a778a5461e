"""What may refuse a load before it commits, beside the protocol: a person's approval and
the rows the audit kept in quarantine (the audit's rules are twophase.audit; the
participants' budgets are their own hook, Participant.budget)."""

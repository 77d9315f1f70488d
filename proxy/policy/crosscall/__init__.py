"""The cross-call view (docs/contract.md §7): what one call cannot see on its own.

Sessions (``session.py``), the state they share across replicas (``store.py``: in memory or in
Redis), repeated failures and session patterns written into envelopes (``review.py``), and a
circuit breaker per operation, opt-in (``circuit.py``). The proxy calls it only for failures: a
success does no work here beyond a dictionary look-up of its operation's circuit.

May import, in the policy floor: ``envelope`` (the model it writes into).
"""

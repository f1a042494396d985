"""pv: contract-driven falsification for ML training runtimes.

A contract (YAML) states claims about a runtime; each falsifier is a prediction that would
prove the runtime wrong, bound to a check that drives the real runtime. Evidence lands in an
append-only ledger, and a contract's lifecycle status is computed from that evidence.
"""

__version__ = "0.1.0"

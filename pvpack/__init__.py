"""pv's falsifier pack: generic checks that drive any training runtime through one protocol.

- `pvpack.protocol`  the runtime protocol (capabilities, validation, CapabilityMissing -> SKIP)
- `pvpack.registry`  runtime name -> validated adapter ([tool.pv] runtimes, resolved at run time)
- `pvpack.subjects`  what a subject is here: an HF checkpoint + token batches in safetensors files
- `pvpack.checks`    one module per concern; contracts bind `check: pvpack.checks.<module>:<fn>`
- `pvpack.adapters`  adapters shipped with the pack (transformers)

The pack depends on pv and torch, never on any runtime it tests.
"""

__version__ = "0.1.0"

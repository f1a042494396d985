"""Automatic source mutants of the code a contract binds (`pv mutate`, docs/mutants.md).

    operators   the mutation operators: libcst rewrites of one site of a module's source
    hook        the import hook that serves one mutated module to a run (no file is edited)
    results     the append-only results file, the marked-equivalent mutants, the scores
    engine      plan (which modules, which falsifiers, which sampled mutants) and run
    report      the `pv status` section: the score per contract and per module, the survivors

Nothing here imports the code under test: the mutants are made from source text, and each one
runs in a pytest subprocess whose import hook swaps in the mutated module.
"""

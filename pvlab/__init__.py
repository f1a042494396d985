"""pvlab: this repository's system under test and the checks that falsify it.

- `pvlab.runtime` — a real torch training runtime (Qwen2/Llama family).
- `pvlab.falsifiers` — the checks that pv contracts bind to, and the planted bugs (mutants).

It is its own distribution (`pv-lab`, pvlab/pyproject.toml), separate from `pv`: installing pv
never puts a `runtime` or `falsifiers` package into site-packages, where it would shadow an
adopting project's own packages of those common names.
"""

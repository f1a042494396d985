"""nanotrainer: a small GPT-style language-model trainer in plain PyTorch.

model.py  the decoder (rotary or learned positions, optional Q/K/V biases, two execution paths)
train.py  AdamW, warmup + cosine schedule, the training step, eval, save/load, greedy generate
data.py   a deterministic synthetic corpus (a sparse Markov chain) to train on in seconds
"""

__version__ = "0.1.0"

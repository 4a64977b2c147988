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


def build_bert_cross_encoder(dst: Path, seed: int = 0) -> Path:
    """A tiny random BERT cross-encoder (BertForSequenceClassification, one
    label: a reranker's shape, as ms-marco-MiniLM) with a WordPiece tokenizer
    whose vocabulary spells any lowercase ASCII word letter by letter; its
    text pairs carry segment ids (token_type_ids)."""
    import string

    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    dst.mkdir(parents=True, exist_ok=True)
    pieces = [*string.ascii_lowercase, *string.digits, *".,?!'-"]
    words = ["the", "capital", "of", "france", "is", "paris", "what", "bananas", "are",
             "yellow", "borders", "spain"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces,
             *("##" + p for p in pieces), *words]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)},
                              do_lower_case=True, model_max_length=256)
    tokenizer.save_pretrained(str(dst))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,  # head size 32 (vLLM CPU)
                        max_position_embeddings=256, type_vocab_size=2,
                        initializer_range=0.05,  # distinct scores of a random model
                        architectures=["BertForSequenceClassification"])
    config.num_labels = 1
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)  # distinct scores
        model.bert.embeddings.token_type_embeddings.weight.normal_(0.0, 1.0)
    model.save_pretrained(str(dst))
    return dst

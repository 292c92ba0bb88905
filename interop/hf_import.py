"""Import a published ELECTRA checkpoint in Hugging Face's layout, to fine-tune it here on GLUE
(paper §3.1 and footnote 1: "Code and pre-trained weights will be released"; Table 8 reports
ELECTRA-Small and -Base on the GLUE test set).

    huggingface-cli download google/electra-small-discriminator --local-dir electra-small-hf
    python finetune_glue.py --ckpt electra-small-hf --glue_dir glue

A Hugging Face model folder holds config.json (the sizes), the weights (pytorch_model.bin, or
model.safetensors) and the tokenizer's vocab.txt (BERT's uncased WordPiece, see interop/wordpiece.py).
load_hf_electra returns what finetune_glue.load_pretrained returns for our own checkpoints -
(encoder weights in our Classifier's names, shapes, tokenizer, info) - so fine-tuning cannot tell
them apart. The weights are renamed by export_hf's table, read backwards: HF's three attention
matrices q, k, v are stacked into our one fused matrix.

Only the encoder is kept (embeddings, 128 -> hidden projection, blocks), as for our checkpoints:
D's pre-training head (or G's, or a classifier) is not used by fine-tuning.
Files are read safely: torch.load(weights_only=True) refuses pickled code, and safetensors
files hold only tensors (the safetensors package is optional; needed only for such files).
"""
import json
from pathlib import Path

import torch

from machinery.checkpoint import CheckpointError
from encoder import EncoderConfig
from interop.export_hf import encoder_from_hf, encoder_shapes
from interop.wordpiece import WordPiece

REQUIRED = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
            "num_attention_heads", "intermediate_size", "max_position_embeddings")


def read_config(folder):
    """config.json, checked to describe an ELECTRA this project's encoder can run."""
    path = folder / "config.json"
    try:
        c = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot be read as JSON ({type(e).__name__})") from None
    if not isinstance(c, dict) or c.get("model_type") != "electra":
        kind = c.get("model_type") if isinstance(c, dict) else None
        raise CheckpointError(f"{path}: not an ELECTRA model (model_type {kind!r})")
    missing = [k for k in REQUIRED if not isinstance(c.get(k), int) or c[k] < 1]
    if missing:
        raise CheckpointError(f"{path}: lacks a positive integer {missing[0]}")
    # What our encoder hard-wires (encoder.py) must be what the model was trained with.
    checks = [("hidden_act", "gelu"), ("type_vocab_size", 2), ("layer_norm_eps", 1e-12),
              ("position_embedding_type", "absolute")]
    for key, ours in checks:
        if c.get(key, ours) != ours:
            raise CheckpointError(f"{path}: {key} {c[key]!r} is not supported (this project's "
                                  f"encoder uses {ours!r})")
    if c["hidden_size"] % c["num_attention_heads"]:
        raise CheckpointError(f"{path}: hidden_size is not a multiple of num_attention_heads")
    return c


def read_weights(folder):
    """The state dict of pytorch_model.bin, else of model.safetensors."""
    bin_, safe = folder / "pytorch_model.bin", folder / "model.safetensors"
    if bin_.is_file():
        try:
            return torch.load(bin_, map_location="cpu", weights_only=True)
        except Exception as e:                   # truncated file, pickled code, not torch at all
            raise CheckpointError(f"{bin_}: cannot be read ({type(e).__name__})") from None
    if safe.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise CheckpointError(f"{safe}: reading it needs the safetensors package: "
                                  "pip install safetensors") from None
        try:
            return load_file(str(safe), device="cpu")
        except Exception as e:
            raise CheckpointError(f"{safe}: cannot be read ({type(e).__name__})") from None
    raise CheckpointError(f"{folder}: holds neither pytorch_model.bin nor model.safetensors "
                          "(sharded checkpoints are not supported)")


def read_tokenizer(folder, vocab_size):
    path = folder / "vocab.txt"
    if not path.is_file():
        hint = "; for a folder written by interop/export_hf.py, fine-tune its ckpt.pt instead" if \
            (folder / "tokenizer.json").is_file() else ""
        raise CheckpointError(f"{folder}: no vocab.txt (the WordPiece vocabulary the model was "
                              f"trained with){hint}")
    lower = True                        # ELECTRA's models are uncased; a cased one says so here
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        try:
            lower = bool(json.loads(tc.read_text(encoding="utf-8")).get("do_lower_case", True))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            raise CheckpointError(f"{tc}: cannot be read as JSON") from None
    try:
        tok = WordPiece.load(path, lower_case=lower)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: not a usable vocabulary ({e})") from None
    if tok.vocab_size != vocab_size:
        raise CheckpointError(f"{path}: {tok.vocab_size} tokens, but config.json says "
                              f"vocab_size {vocab_size}")
    return tok


def load_hf_electra(path):
    """(state dict in finetune_glue.Classifier's names, shapes, tokenizer, info) of a Hugging
    Face ELECTRA folder - the same four things finetune_glue.load_pretrained returns."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: a folder without config.json is not a Hugging Face "
                              "model folder")
    c = read_config(folder)
    sd = read_weights(folder)
    if not isinstance(sd, dict):
        raise CheckpointError(f"{folder}: the weights file holds no state dict")
    # ElectraForPreTraining / ForMaskedLM / For...Classification keep the encoder under
    # "electra."; a bare ElectraModel has no prefix. Heads and buffers are left behind.
    prefix = "electra." if any(k.startswith("electra.") for k in sd) else ""
    sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    for name, shape in encoder_shapes(c).items():
        if name not in sd:
            raise CheckpointError(f"{folder}: the weights lack {prefix}{name}, which config.json "
                                  "implies")
        if tuple(sd[name].shape) != shape:
            raise CheckpointError(f"{folder}: {prefix}{name} has shape {list(sd[name].shape)}, "
                                  f"config.json implies {list(shape)}")
    state = {k: v.float() for k, v in encoder_from_hf(sd, c["num_hidden_layers"]).items()}
    enc = EncoderConfig(hidden=c["hidden_size"], layers=c["num_hidden_layers"],
                        heads=c["num_attention_heads"], ffn=c["intermediate_size"],
                        dropout=float(c.get("hidden_dropout_prob", 0.1)))
    shapes = dict(vocab_size=c["vocab_size"], emb_size=c["embedding_size"],
                  max_len=c["max_position_embeddings"], enc=enc)
    tok = read_tokenizer(folder, c["vocab_size"])
    # The folder says nothing of how it was pre-trained: steps and FLOPs are unknown (0 here).
    # (Google's ELECTRA-Small: 1M steps, ~1.3e18 FLOPs by our count, Table 1: 1.4e18.)
    info = dict(model="electra", objective="electra", flops=0.0, steps=0, elapsed_s=0.0,
                params=sum(v.numel() for v in state.values()), device=None,
                source=f"hugging face folder {folder}")
    return state, shapes, tok, info

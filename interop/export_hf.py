"""Export a pre-trained ELECTRA to Hugging Face `transformers` (paper §2: after pre-training D is
the model we keep; §3.2: G is a small masked LM on the same embeddings).

    python interop/export_hf.py --ckpt out/ckpt.pt --out electra-hf               # D only
    python interop/export_hf.py --ckpt out/ckpt.pt --out electra-hf --generator   # + G in electra-hf/generator

writes what `ElectraForPreTraining.from_pretrained(DIR)` (D), `ElectraForMaskedLM.from_pretrained(
DIR/generator)` (G) and `AutoTokenizer.from_pretrained(DIR)` read: config.json, pytorch_model.bin
(and model.safetensors with --safetensors), tokenizer.json, tokenizer_config.json and
special_tokens_map.json. A BERT-Small checkpoint (--model bert) has no D: its MLM goes to DIR as
an ElectraForMaskedLM (the same network as BERT's, with ELECTRA's 128-wide embeddings).

Hugging Face's ELECTRA and ours are the same network (both copy the official TensorFlow code), so
the weights only need new names (the tables EMBEDDINGS, PROJ, BLOCK, HEADS below; "electra." is
HF's prefix for the encoder, ElectraModel) - and one split: our attention computes q, k and v with
one fused (hidden -> 3 hidden) matrix, one matmul instead of three; HF keeps three matrices. G's
output matrix is the token embedding matrix (tied, §3.2), in HF too (tie_word_embeddings).

The tokenizer: our byte-level BPE becomes an HF `tokenizers` BPE (see tokenizer_json below).
Only torch and this project are needed here: config and tokenizer are written as plain JSON;
`transformers` is needed only to *load* the export (pip install transformers).
"""
import json
import sys
from pathlib import Path

import torch

if not __package__:   # run as a path (python interop/export_hf.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from machinery.atomic import atomic_write
from machinery.checkpoint import CheckpointError, load_checkpoint
from config import Config
from machinery.tokenizer import PAT_STR, SPECIAL_TOKENS, Tokenizer


class ExportError(Exception):
    """A checkpoint that cannot be exported as asked; printed as one line."""


# ----------------------------------------------------------------------------- names and shapes

# (our name, HF name) below the encoder's prefix; HF's names start after "electra.".
EMBEDDINGS = [("embeddings.token.weight", "embeddings.word_embeddings.weight"),
              ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
              ("embeddings.segment.weight", "embeddings.token_type_embeddings.weight"),
              ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
              ("embeddings.norm.bias", "embeddings.LayerNorm.bias")]
PROJ = [("encoder.proj." + p, "embeddings_project." + p) for p in ("weight", "bias")]
BLOCK = [("attn.out", "attention.output.dense"), ("norm1", "attention.output.LayerNorm"),
         ("ffn_in", "intermediate.dense"), ("ffn_out", "output.dense"),
         ("norm2", "output.LayerNorm")]
QKV = ("query", "key", "value")
HEADS = {"disc": [("head_dense", "discriminator_predictions.dense"),          # D (§2)
                  ("head_out", "discriminator_predictions.dense_prediction")],
         "mlm": [("head.dense", "generator_predictions.dense"),               # G or BERT
                 ("head.norm", "generator_predictions.LayerNorm")]}


def encoder_to_hf(sd, layers):
    """Our embeddings.* and encoder.* tensors -> HF's ElectraModel names (without "electra.")."""
    out = {hf: sd[ours] for ours, hf in EMBEDDINGS}
    if "encoder.proj.weight" in sd:           # absent when embedding size == hidden size
        out.update({hf: sd[ours] for ours, hf in PROJ})
    for i in range(layers):
        a, b = f"encoder.blocks.{i}.", f"encoder.layer.{i}."
        for p in ("weight", "bias"):
            # rows [0:H] of the fused matrix make q, [H:2H] k, [2H:3H] v (SelfAttention.forward)
            for name, part in zip(QKV, sd[a + "attn.qkv." + p].chunk(3, dim=0)):
                out[b + f"attention.self.{name}.{p}"] = part.clone()
            for ours, hf in BLOCK:
                out[b + f"{hf}.{p}"] = sd[a + f"{ours}.{p}"]
    return out


def encoder_from_hf(sd, layers):
    """The inverse of encoder_to_hf: HF ElectraModel names -> our embeddings.* / encoder.*."""
    out = {ours: sd[hf] for ours, hf in EMBEDDINGS}
    if "embeddings_project.weight" in sd:
        out.update({ours: sd[hf] for ours, hf in PROJ})
    for i in range(layers):
        a, b = f"encoder.blocks.{i}.", f"encoder.layer.{i}."
        for p in ("weight", "bias"):
            out[a + "attn.qkv." + p] = torch.cat([sd[b + f"attention.self.{n}.{p}"] for n in QKV])
            for ours, hf in BLOCK:
                out[a + f"{ours}.{p}"] = sd[b + f"{hf}.{p}"]
    return out


def encoder_shapes(c):
    """The shape of every ElectraModel tensor that an HF ELECTRA config dict `c` implies."""
    V, E, H, F = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    s = {"embeddings.word_embeddings.weight": (V, E),
         "embeddings.position_embeddings.weight": (c["max_position_embeddings"], E),
         "embeddings.token_type_embeddings.weight": (c.get("type_vocab_size", 2), E),
         "embeddings.LayerNorm.weight": (E,), "embeddings.LayerNorm.bias": (E,)}
    if E != H:
        s.update({"embeddings_project.weight": (H, E), "embeddings_project.bias": (H,)})
    per_layer = [("attention.self.query", H, H), ("attention.self.key", H, H),
                 ("attention.self.value", H, H), ("attention.output.dense", H, H),
                 ("attention.output.LayerNorm", H, 0), ("intermediate.dense", F, H),
                 ("output.dense", H, F), ("output.LayerNorm", H, 0)]
    for i in range(c["num_hidden_layers"]):
        for name, rows, cols in per_layer:      # a Linear is (out, in); a LayerNorm (H,)
            s[f"encoder.layer.{i}.{name}.weight"] = (rows, cols) if cols else (rows,)
            s[f"encoder.layer.{i}.{name}.bias"] = (rows,)
    return s


def hf_config(arch, cfg, enc, pad_id):
    """config.json for one network: `enc` is D's or G's EncoderConfig, `cfg` our Config."""
    return {"architectures": [arch], "model_type": "electra", "vocab_size": cfg.vocab_size,
            "embedding_size": cfg.emb_size, "hidden_size": enc.hidden,
            "num_hidden_layers": enc.layers, "num_attention_heads": enc.heads,
            "intermediate_size": enc.ffn, "hidden_act": "gelu",   # exact (erf) GELU, as F.gelu
            "hidden_dropout_prob": enc.dropout, "attention_probs_dropout_prob": enc.dropout,
            "max_position_embeddings": cfg.max_len, "type_vocab_size": 2,
            "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": pad_id,
            "position_embedding_type": "absolute", "tie_word_embeddings": True}


# ----------------------------------------------------------------------------- tokenizer

def bytes_to_unicode():
    """GPT-2's byte -> character table, used by HF's ByteLevel pre-tokenizer: BPE vocabularies in
    JSON are strings, so every byte gets a printable character - the 188 printable Latin-1 bytes
    themselves, the other 68 (space, control bytes, ...) the characters 256.. (space -> 'Ġ')."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_merges(ranks):
    """tiktoken keeps BPE as *ranks of whole tokens*: it merges the adjacent pair whose
    concatenation has the lowest rank. HF's BPE keeps a *list of merges*: it merges the adjacent
    pair that comes first in the list. The two agree when every way of writing a token as two
    tokens is a merge placed at that token's rank - not only the pair the trainer merged: if "bc"
    was learned before "ab", tiktoken builds "abc" from "a" + "bc" though training merged "ab" + "c".
    Ties within one token: by the ranks of the left, then the right part (as transformers' own
    tiktoken converter). Returns [(left bytes, right bytes)] in priority order."""
    index = {t: i for i, t in enumerate(ranks)}
    merges = []
    for t in ranks:                     # rank order = priority order
        splits = [(t[:i], t[i:]) for i in range(1, len(t)) if t[:i] in index and t[i:] in index]
        merges += sorted(splits, key=lambda p: (index[p[0]], index[p[1]]))
    return merges


def tokenizer_json(tok: Tokenizer):
    """HF `tokenizers` JSON equivalent to our tiktoken encoding (plain dicts; no library needed):
    the same split regex (PAT_STR) then bytes -> characters (ByteLevel), BPE with ranks as ids,
    our four special tokens at their ids, and [CLS] a [SEP] (b [SEP]) with token types 0 / 1 as
    glue.build_input makes them. ignore_merges: a chunk that is a whole token is taken as it is,
    as tiktoken does, before any merging."""
    b2u = bytes_to_unicode()
    s = lambda t: "".join(b2u[b] for b in t)       # noqa: E731  bytes -> vocabulary string
    added = [{"id": i, "content": t, "single_word": False, "lstrip": t == "[MASK]",
              "rstrip": False, "normalized": False, "special": True}
             for t, i in zip(SPECIAL_TOKENS, tok.special_ids)]
    # [MASK] absorbs the space before it (lstrip, like RoBERTa's <mask>): in our BPE the space
    # belongs to the next word (" Paris"), so "is [MASK]." asks for " Paris", not for " ".
    special = lambda name, type_id: {"SpecialToken": {"id": name, "type_id": type_id}}  # noqa
    seq = lambda name, type_id: {"Sequence": {"id": name, "type_id": type_id}}         # noqa
    single = [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PAT_STR}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {
            "type": "TemplateProcessing", "single": single,
            "pair": single + [seq("B", 1), special("[SEP]", 1)],
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in
                               (("[CLS]", tok.cls_id), ("[SEP]", tok.sep_id))}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {s(t): i for i, t in enumerate(tok.ranks)},
                  # "a b" strings: ByteLevel strings never hold a real space
                  "merges": [f"{s(a)} {s(b)}" for a, b in bpe_merges(tok.ranks)]}}


def write_tokenizer(out, tok: Tokenizer, max_len):
    specials = {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                "mask_token": "[MASK]"}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
              "clean_up_tokenization_spaces": False,
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"], **specials}
    write_json(out / "tokenizer.json", tokenizer_json(tok), indent=None)
    write_json(out / "tokenizer_config.json", config)
    write_json(out / "special_tokens_map.json", specials)


# ----------------------------------------------------------------------------- export

def write_json(path, obj, indent=2):
    text = json.dumps(obj, indent=indent, ensure_ascii=False)
    atomic_write(path, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))


def network_state(model_sd, prefix, fallback_prefix=None):
    """One network's tensors without its prefix. The shared embeddings may be stored under
    both owners' prefixes (state_dict walks every owner of a shared module) or one of them."""
    sd = {k[len(prefix):]: v for k, v in model_sd.items() if k.startswith(prefix)}
    if "embeddings.token.weight" not in sd and fallback_prefix:
        sd.update({k[len(fallback_prefix):]: v for k, v in model_sd.items()
                   if k.startswith(fallback_prefix + "embeddings.")})
    return sd


def write_network(out, sd, cfg, enc, kind, tok, safetensors, log):
    """Write one network to `out`: kind "disc" (ElectraForPreTraining) or "mlm"
    (ElectraForMaskedLM)."""
    arch = "ElectraForPreTraining" if kind == "disc" else "ElectraForMaskedLM"
    c = hf_config(arch, cfg, enc, tok.pad_id)
    try:
        hf = {"electra." + k: v for k, v in encoder_to_hf(sd, enc.layers).items()}
        for ours, theirs in HEADS[kind]:
            hf.update({f"{theirs}.{p}": sd[f"{ours}.{p}"] for p in ("weight", "bias")})
        if kind == "mlm":                   # the output weight is tied to word_embeddings
            hf["generator_lm_head.bias"] = sd["head.bias"]
    except KeyError as e:
        raise ExportError(f"the checkpoint lacks {e.args[0]} for {arch}") from None
    want = {"electra." + k: v for k, v in encoder_shapes(c).items()}
    bad = [k for k, shape in want.items() if tuple(hf[k].shape) != shape]
    if bad or len(hf) - len(want) != (4 if kind == "disc" else 5):
        raise ExportError(f"weights do not fit the config ({bad[:1] or 'tensor count'})")
    hf = {k: v.detach().float().contiguous().cpu() for k, v in hf.items()}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", c)
    atomic_write(out / "pytorch_model.bin", lambda tmp: torch.save(hf, tmp))
    if safetensors:
        from safetensors.torch import save_file
        atomic_write(out / "model.safetensors",
                     lambda tmp: save_file(hf, str(tmp), metadata={"format": "pt"}))
    write_tokenizer(out, tok, cfg.max_len)
    log(f"wrote {out}: {arch}, {sum(v.numel() for v in hf.values()) / 1e6:.2f}M params, "
        f"{enc.layers} x {enc.hidden}, {enc.heads} heads, vocab {cfg.vocab_size}")


def export(ckpt_path, out, generator=False, safetensors=False, log=print):
    ckpt = load_checkpoint(ckpt_path)
    try:
        cfg = Config.from_dict(ckpt["config"])
        tok = Tokenizer.from_text(ckpt["tokenizer"])
    except (KeyError, TypeError, ValueError) as e:
        raise ExportError(f"{ckpt_path}: unusable config or tokenizer ({e})") from None
    if tok.vocab_size != cfg.vocab_size:
        raise ExportError(f"tokenizer has {tok.vocab_size} ids, the model {cfg.vocab_size}")
    if safetensors:
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:
            raise ExportError("--safetensors needs the safetensors package: "
                              "pip install safetensors") from None
    sd, out = ckpt["model"], Path(out)
    if cfg.model == "bert":                 # BERT-Small: one MLM at D's size, no D, no G
        if generator:
            raise ExportError("a BERT checkpoint has no generator: its MLM is exported to "
                              "--out itself (drop --generator)")
        write_network(out, network_state(sd, "mlm."), cfg, cfg.disc, "mlm", tok, safetensors,
                      log)
        log("BERT checkpoint: exported its masked LM as ElectraForMaskedLM (no discriminator)")
        return
    if "discriminator.head_out.weight" not in sd:
        raise ExportError(f"D of this checkpoint (objective {cfg.objective}) is not a per-token "
                          "replaced/real classifier; ElectraForPreTraining cannot hold it")
    if generator and "generator.head.bias" not in sd:
        raise ExportError(f"--generator: this checkpoint (generator {cfg.generator}) has no "
                          "masked-LM generator network")
    write_network(out, network_state(sd, "discriminator.", "generator."), cfg, cfg.disc, "disc",
                  tok, safetensors, log)
    if generator:
        write_network(out / "generator", network_state(sd, "generator.", "discriminator."),
                      cfg, cfg.gen, "mlm", tok, safetensors, log)


def main(argv=None):
    p = cli.Parser(description="Export a pre-training checkpoint's D (and G) in the layout "
                   "Hugging Face transformers loads.")
    p.add_argument("--ckpt", type=cli.nonempty, required=True,
                   help="pre-training checkpoint (ckpt.pt)")
    p.add_argument("--out", type=cli.out_folder, required=True,
                   help="folder to write (created if needed)")
    p.add_argument("--generator", action="store_true", help="also write G into OUT/generator")
    p.add_argument("--safetensors", action="store_true",
                   help="also write model.safetensors (needs the safetensors package)")
    args = p.parse_args(argv)
    try:
        export(args.ckpt, args.out, args.generator, args.safetensors)
    except (CheckpointError, ExportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {args.out}: cannot write ({e.strerror or e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

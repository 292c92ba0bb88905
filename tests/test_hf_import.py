"""Tests for interop/hf_import.py (a Hugging Face ELECTRA folder as finetune_glue --ckpt) and interop/wordpiece.py
(BERT's uncased WordPiece): our encoder on imported weights equals HF's ElectraModel, a fine-tuning
run from an imported folder completes, bad folders fail in one line, and our WordPiece gives the
ids of transformers' BertTokenizer on CoLA and RTE dev.

The transformers comparisons skip when it is absent; a folder the test writes itself (config.json
+ torch.save'd weights under HF's names) is imported without it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune_glue as fg  # noqa: E402
import glue  # noqa: E402
from interop.export_hf import encoder_from_hf, encoder_shapes, encoder_to_hf  # noqa: E402
from test_glue import A, B, Y, write_glue  # noqa: E402
from interop.wordpiece import WordPiece, basic_tokenize  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")               # never download
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # no warnings into captured streams
GLUE = ROOT.parent / "shared" / "data" / "glue"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a cat dog sat on mat was sitting nobody spoke quote quoted she said starting row "
         "with another third sentence here un ##aff ##able ##s ##ing ##ed . , ! ? \" ' "
         "hello world cafe").split()
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: restores the count after


def vocab_tokens():
    """Specials, every ASCII letter alone and as "##x" (so most words split), a few words."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return SPECIALS + WORDS + letters + ["##" + c for c in letters] + ["中", "文"]


def hf_config(vocab_size, **over):
    return {"architectures": ["ElectraForPreTraining"], "model_type": "electra",
            "vocab_size": vocab_size, **TINY, "hidden_act": "gelu", "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1, "pad_token_id": 0, **over}


def write_hf_folder(folder, seed=0, prefix="electra.", **over):
    """What save_pretrained writes, by hand: config.json, HF-named weights (plus D's head and the
    position_ids buffer older files hold), vocab.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens = vocab_tokens()
    c = hf_config(len(tokens), **over)
    g = torch.Generator().manual_seed(seed)
    sd = {prefix + k: torch.randn(s, generator=g) * 0.3 for k, s in encoder_shapes(c).items()}
    H = c["hidden_size"]
    sd.update({"discriminator_predictions.dense.weight": torch.randn(H, H, generator=g),
               "discriminator_predictions.dense.bias": torch.zeros(H),
               prefix + "embeddings.position_ids": torch.arange(64)[None]})
    (folder / "config.json").write_text(json.dumps(c))
    torch.save(sd, folder / "pytorch_model.bin")
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return sd


# ----------------------------------------------------------------------------- WordPiece

def test_wordpiece_rules():
    wp = WordPiece(vocab_tokens())
    assert wp.tokenize("unaffable") == ["un", "##aff", "##able"]          # longest match first
    assert wp.tokenize("Héllo,  WORLD!") == ["hello", ",", "world", "!"]  # case, accent, punct.
    assert basic_tokenize("Café\u0000 x\u200by\tz") == ["cafe", "xy", "z"]  # NUL, ZWSP dropped
    assert basic_tokenize("$5+3^2=`x`|~") == list("$5+3^2=`x`|~")     # ASCII symbols split
    assert basic_tokenize("中文abc") == ["中", "文", "abc"]               # CJK: one word each
    assert basic_tokenize("don't «go»") == ["don", "'", "t", "«", "go", "»"]
    assert basic_tokenize("Äbc", lower_case=False) == ["Äbc"]
    assert wp.tokenize("cats") == ["cat", "##s"] and wp.tokenize("xyz") == ["x", "##y", "##z"]
    assert wp.tokenize("é1") == ["[UNK]"]                     # "##1" is not in the vocabulary
    assert wp.tokenize("a" * 101 + " cat") == ["[UNK]", "cat"]  # over 100 characters
    assert wp.tokenize("[MASK]") == ["[UNK]", "m", "##a", "##s", "##k", "[UNK]"]  # mere text
    assert wp.decode(wp.encode("unaffable cat")) == "unaffable cat"
    assert (wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id) == (0, 1, 2, 3, 4)
    ids, seg = glue.encode_example(wp, "The cat.", "A dog")
    assert ids[0] == wp.cls_id and ids.count(wp.sep_id) == 2 and seg[-1] == 1
    with pytest.raises(ValueError, match=r"lacks \[CLS\]"):
        WordPiece(["[PAD]", "[UNK]", "[SEP]"])


def glue_sentences():
    if not (GLUE / "CoLA").is_dir() or not (GLUE / "RTE").is_dir():
        pytest.skip(f"{GLUE} with CoLA and RTE is absent (real GLUE only on the dev machine)")
    (cola, cola_dev), (rte, rte_dev) = glue.read_task(GLUE, "cola"), glue.read_task(GLUE, "rte")
    train = [e.a for e in cola] + [s for e in rte for s in (e.a, e.b)]
    dev = [e.a for e in cola_dev["dev"]] + [s for e in rte_dev["dev"] for s in (e.a, e.b)]
    return train, dev


def test_wordpiece_matches_bert_tokenizer_on_cola_and_rte_dev(tmp_path):
    """A WordPiece vocabulary trained on CoLA + RTE train (by the tokenizers library), with
    every token holding "z" removed so that [UNK] occurs; then every CoLA dev sentence and every
    RTE dev sentence, plus edge cases, must get the ids of HF's BertTokenizer (fast) and
    BertTokenizerLegacy (the pure-Python original)."""
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import BertTokenizer
    train, dev = glue_sentences()
    trainer = tokenizers.BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(train, vocab_size=3000, special_tokens=SPECIALS)
    vocab = [t for t, _ in sorted(trainer.get_vocab().items(), key=lambda kv: kv[1])
             if t in SPECIALS or "z" not in t]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    edge = ["Ünïcödé àçcénts, Ελληνικά, русский", "東京は日本の首都です。北京", "tab\there\u00a0nbsp",
            "$5+3^2=`x`|~ «quote» — dash…", "x" * 101, "zzz buzz", "ctrl\u0007char\u200bzwsp"]
    hf = [BertTokenizer.from_pretrained(tmp_path)]
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
        hf.append(BertTokenizerLegacy(vocab_file=str(tmp_path / "vocab.txt")))
    except ImportError:                         # older transformers: BertTokenizer is the slow one
        pass
    ours = WordPiece.load(tmp_path / "vocab.txt")
    texts = dev + edge
    mine = ours.encode_batch(texts)
    for ref in hf:
        theirs = [ref(t, add_special_tokens=False)["input_ids"] for t in texts]
        diff = [t for t, a, b in zip(texts, mine, theirs) if a != b]
        assert not diff, (type(ref).__name__, len(diff), diff[:3])
    pieces = [ours.tokens[i] for ids in mine[:len(dev)] for i in ids]
    assert len(dev) == 1043 + 2 * 277                             # all of CoLA dev and RTE dev
    n_cont, n_unk = sum(p.startswith("##") for p in pieces), pieces.count("[UNK]")
    print(f"WordPiece = {', '.join(type(r).__name__ for r in hf)} on {len(texts)} texts "
          f"({len(dev)} CoLA/RTE dev sentences): {len(pieces)} tokens, {n_cont} '##', {n_unk} [UNK]")
    assert n_cont > 1000 and n_unk > 20
    pair = hf[0](dev[-2], dev[-1])                              # an RTE pair, not truncated
    assert glue.encode_example(ours, dev[-2], dev[-1], max_len=10 ** 6) == \
        (pair["input_ids"], pair["token_type_ids"])


# ----------------------------------------------------------------------------- importing

def test_imported_encoder_equals_hf_electra_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    tokens = vocab_tokens()
    torch.manual_seed(0)
    cfg = transformers.ElectraConfig(vocab_size=len(tokens), **TINY)
    hf = transformers.ElectraForPreTraining(cfg)
    with torch.no_grad():                   # LayerNorms and biases away from 1 / 0 too
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    state, shapes, tok, info = fg.load_pretrained(tmp_path / "hf")
    assert info["model"] == "electra" and shapes["enc"].hidden == 32 and shapes["max_len"] == 64
    model = fg.build_classifier(state, shapes, 2, 0.1).eval()
    inputs = [glue.encode_example(tok, "The cat sat on the mat.", "Nobody spoke!"),
              glue.encode_example(tok, "Hello world, she said.")]
    ids, seg, pad = fg.collate(inputs, [0, 1], tok.pad_id, "cpu")
    with torch.no_grad():
        ours = model.encoder(model.embeddings(ids, seg), pad)
        theirs = hf.eval().electra(input_ids=ids, attention_mask=pad.long(),
                                   token_type_ids=seg).last_hidden_state
    diff = (ours - theirs)[pad].abs().max().item()
    print(f"imported encoder vs HF ElectraModel: max abs diff {diff:.2e}")
    assert diff <= 1e-4


def test_import_without_transformers(tmp_path):
    sd = write_hf_folder(tmp_path / "m")
    state, shapes, tok, info = fg.load_pretrained(tmp_path / "m")
    assert set(state) == set(fg.build_classifier(state, shapes, 2, 0.1).state_dict()) - \
        {"head.weight", "head.bias"}
    q, k, v = (sd[f"electra.encoder.layer.1.attention.self.{n}.weight"] for n in
               ("query", "key", "value"))
    assert torch.equal(state["encoder.blocks.1.attn.qkv.weight"], torch.cat([q, k, v]))
    assert torch.equal(state["embeddings.token.weight"],
                       sd["electra.embeddings.word_embeddings.weight"])
    assert torch.equal(state["encoder.proj.weight"], sd["electra.embeddings_project.weight"])
    assert tok.vocab_size == shapes["vocab_size"] and info["params"] == sum(
        t.numel() for t in state.values())
    write_hf_folder(tmp_path / "bare", prefix="")                # a bare ElectraModel's names
    assert fg.load_pretrained(tmp_path / "bare")[0].keys() == state.keys()
    with torch.no_grad():
        model = fg.build_classifier(state, shapes, 3, 0.1).eval()
        out = model(*fg.collate([glue.encode_example(tok, "the cat sat")], [0], 0, "cpu"))
    assert out.shape == (1, 3) and torch.isfinite(out).all()


def test_name_map_round_trip():
    """export_hf's table read forwards then backwards gives every tensor back, unchanged."""
    enc = fg.EncoderConfig(hidden=32, layers=2, heads=2, ffn=64)
    sd = fg.Classifier(50, 16, 64, enc, 2).state_dict()
    sd = {k: v for k, v in sd.items() if not k.startswith("head.")}
    back = encoder_from_hf(encoder_to_hf(sd, 2), 2)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)


def test_safetensors_only_folder(tmp_path, monkeypatch):
    st = pytest.importorskip("safetensors.torch")
    sd = write_hf_folder(tmp_path / "m")
    (tmp_path / "m" / "pytorch_model.bin").unlink()
    st.save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "m" /
                                                                  "model.safetensors"))
    assert "encoder.blocks.0.attn.qkv.weight" in fg.load_pretrained(tmp_path / "m")[0]
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)   # as if not installed
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(fg.CheckpointError, match="pip install safetensors"):
        fg.load_pretrained(tmp_path / "m")


def test_finetune_cli_from_imported_folder(tmp_path):
    write_hf_folder(tmp_path / "hf")
    write_glue(tmp_path / "g", A * 4, B * 4, Y * 4, ["RTE"])
    res = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "finetune_glue.py", "--ckpt", str(tmp_path / "hf"),
                        "--glue_dir", str(tmp_path / "g"), "--tasks", "rte", "--epochs", "1",
                        "--threads", "1", "--out", str(res)], cwd=ROOT, capture_output=True,
                       text=True, timeout=HANG, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    r = json.loads(res.read_text())
    assert r["glue_tasks"] == ["rte"] and 0 <= r["tasks"]["rte"]["median"]["acc"] <= 1
    assert r["pretrain"]["model"] == "electra" and "hugging face" in r["pretrain"]["source"]
    assert "rte seed 0 epoch 1/1" in p.stdout


def one_line_error(code, out, err, *needles):
    lines = [l for l in err.splitlines() if l.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("break_it, needle", [
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "bert"})),
     "not an ELECTRA model"),
    (lambda d: (d / "config.json").write_text("{not json"), "cannot be read as JSON"),
    (lambda d: (d / "pytorch_model.bin").unlink(), "neither pytorch_model.bin"),
    (lambda d: (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04junk"), "cannot be read"),
    (lambda d: (d / "vocab.txt").unlink(), "no vocab.txt"),
    (lambda d: (d / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n"), "vocab_size"),
    (lambda d: (d / "config.json").write_text(json.dumps(hf_config(len(vocab_tokens()),
                                                                   hidden_size=48))),
     "has shape"),
    (lambda d: (d / "config.json").write_text(json.dumps(hf_config(len(vocab_tokens()),
                                                                   num_hidden_layers=3))),
     "lack electra.encoder.layer.2"),
    (lambda d: (d / "config.json").write_text(json.dumps(hf_config(len(vocab_tokens()),
                                                                   hidden_act="relu"))),
     "hidden_act"),
    (lambda d: (d / "config.json").unlink(), "without config.json"),
])
def test_bad_folders_fail_in_one_line(tmp_path, capsys, break_it, needle):
    write_hf_folder(tmp_path / "hf")
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    break_it(tmp_path / "hf")
    code = fg.main(["--ckpt", str(tmp_path / "hf"), "--glue_dir", str(tmp_path / "g"),
                    "--out", str(tmp_path / "r.json"), "--threads", "1"])
    out, err = capsys.readouterr()
    one_line_error(code, out, err, needle)
    assert not (tmp_path / "r.json").exists()


def test_bad_folder_cli_subprocess(tmp_path):
    write_hf_folder(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    p = subprocess.run([sys.executable, "finetune_glue.py", "--ckpt", str(tmp_path / "hf"),
                        "--glue_dir", str(tmp_path / "g")], cwd=ROOT, capture_output=True,
                       text=True, timeout=HANG)
    one_line_error(p.returncode, p.stdout, p.stderr, "model_type 'roberta'")

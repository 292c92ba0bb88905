"""Tests for interop/export_hf.py: the exported folder's structure (config, HF parameter names and shapes,
tokenizer.json consistent with our ranks) without transformers; with transformers, that
ElectraForPreTraining / ElectraForMaskedLM loaded from the export give our D's and G's logits on
real text, and that AutoTokenizer gives our ids (pairs included).

The models are tiny (SIZES["tiny"]) with every weight - LayerNorms and biases included - moved
away from its initial value, so a wrongly mapped tensor cannot hide behind a 1 or a 0."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from interop import export_hf  # noqa: E402
import glue  # noqa: E402
from machinery.checkpoint import save_checkpoint  # noqa: E402
from config import SIZES, Config  # noqa: E402
from conftest import HANG, generated_text, real_text  # noqa: E402
from objectives import BERT, ELECTRA  # noqa: E402
from machinery.tokenizer import SPECIAL_TOKENS, Tokenizer, train_bpe  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")               # never download
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # no warnings into captured streams
TOL = 1e-4


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: restores the count after


def corpus():
    """Real text when ../shared is here: the first 300k characters train the BPE, the rest tests."""
    text = real_text(450_000) or generated_text(6000)
    cut = len(text) * 2 // 3
    paras = [p.strip() for p in text[cut:].split("\n") if len(p.strip()) > 40]
    return text[:cut], paras


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(train_bpe([corpus()[0]], 1500))


@pytest.fixture(scope="module")
def paras():
    return corpus()[1]


def installed(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def tiny_checkpoint(path, tok, model="electra", seed=0):
    cfg = Config(**SIZES["tiny"], vocab_size=tok.vocab_size, model=model)
    torch.manual_seed(seed)
    m = ELECTRA(cfg) if model == "electra" else BERT(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_checkpoint(path, dict(config=cfg.to_dict(), model=m.state_dict(), step=7,
                               tokenizer=tok.to_text()))
    return cfg, m.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tok):
    d = tmp_path_factory.mktemp("export")
    cfg, m = tiny_checkpoint(d / "ckpt.pt", tok)
    assert export_hf.main(["--ckpt", str(d / "ckpt.pt"), "--out", str(d / "hf"),
                           "--generator"]) == 0
    return d / "hf", cfg, m


def batch(tok, texts, T=64):
    """[CLS] text [SEP], cut to T tokens and padded: (ids, pad mask), as pre-training inputs."""
    rows = [[tok.cls_id] + tok.encode(t)[:T - 2] + [tok.sep_id] for t in texts]
    ids = torch.full((len(rows), max(map(len, rows))), tok.pad_id)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    return ids, ids != tok.pad_id


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(*args, capsys=None):
    """export_hf's command line: in this process when given capsys (fast), else a subprocess."""
    if capsys is not None:
        code = export_hf.main(list(map(str, args)))
        return Result(code, *capsys.readouterr())
    return subprocess.run([sys.executable, "interop/export_hf.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG)


# ----------------------------------------------------------------------------- no transformers

def test_export_structure(exported, tok):
    out, cfg, m = exported
    for folder, enc, arch in ((out, cfg.disc, "ElectraForPreTraining"),
                              (out / "generator", cfg.gen, "ElectraForMaskedLM")):
        c = json.loads((folder / "config.json").read_text())
        assert c["architectures"] == [arch] and c["model_type"] == "electra"
        assert (c["embedding_size"], c["hidden_size"], c["num_hidden_layers"],
                c["num_attention_heads"], c["intermediate_size"]) == \
            (32, enc.hidden, enc.layers, enc.heads, enc.ffn)
        assert (c["vocab_size"], c["max_position_embeddings"], c["type_vocab_size"],
                c["layer_norm_eps"], c["hidden_act"], c["pad_token_id"]) == \
            (tok.vocab_size, 64, 2, 1e-12, "gelu", tok.pad_id)
        sd = torch.load(folder / "pytorch_model.bin", weights_only=True)
        heads = {"discriminator_predictions.dense.weight": (64, 64),
                 "discriminator_predictions.dense.bias": (64,),
                 "discriminator_predictions.dense_prediction.weight": (1, 64),
                 "discriminator_predictions.dense_prediction.bias": (1,)} if enc is cfg.disc \
            else {"generator_predictions.dense.weight": (32, 16),
                  "generator_predictions.dense.bias": (32,),
                  "generator_predictions.LayerNorm.weight": (32,),
                  "generator_predictions.LayerNorm.bias": (32,),
                  "generator_lm_head.bias": (tok.vocab_size,)}
        want = {"electra." + k: s for k, s in export_hf.encoder_shapes(c).items()} | heads
        assert {k: tuple(v.shape) for k, v in sd.items()} == want
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            assert (folder / name).is_file()
    sd = torch.load(out / "pytorch_model.bin", weights_only=True)
    qkv = m.discriminator.encoder.blocks[1].attn.qkv
    H = cfg.disc.hidden
    for i, n in enumerate(("query", "key", "value")):
        assert torch.equal(sd[f"electra.encoder.layer.1.attention.self.{n}.weight"],
                           qkv.weight[i * H:(i + 1) * H])
        assert torch.equal(sd[f"electra.encoder.layer.1.attention.self.{n}.bias"],
                           qkv.bias[i * H:(i + 1) * H])
    assert torch.equal(sd["electra.embeddings.word_embeddings.weight"],
                       m.discriminator.embeddings.token.weight)
    g = torch.load(out / "generator" / "pytorch_model.bin", weights_only=True)
    assert torch.equal(g["generator_lm_head.bias"], m.generator.head.bias)


def test_tokenizer_json_matches_ranks(exported, tok):
    out = exported[0]
    j = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    b2u = export_hf.bytes_to_unicode()
    assert sorted(b2u) == list(range(256)) and len(set(b2u.values())) == 256
    s = lambda t: "".join(b2u[b] for b in t)                       # noqa: E731
    vocab = j["model"]["vocab"]
    assert vocab == {s(t): i for i, t in enumerate(tok.ranks)} and vocab[s(b" the")] > 255
    assert [(a["id"], a["content"], a["special"]) for a in j["added_tokens"]] == \
        [(i, t, True) for t, i in zip(SPECIAL_TOKENS, tok.special_ids)]
    merges = [m.split(" ") for m in j["model"]["merges"]]
    assert all(len(m) == 2 and m[0] + m[1] in vocab for m in merges)
    result_ranks = [vocab[a + b] for a, b in merges]
    assert result_ranks == sorted(result_ranks)                    # priority = rank of result
    assert set(result_ranks) == set(range(256, len(tok.ranks)))    # every merged token reachable
    assert j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == \
        __import__("machinery.tokenizer").tokenizer.PAT_STR
    pair = j["post_processor"]["pair"]
    assert [next(iter(x.values()))["type_id"] for x in pair] == [0, 0, 0, 1, 1]
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["mask_token"] == "[MASK]"


def test_tokenizers_library_gives_our_ids(exported, tok, paras):
    """Only the `tokenizers` package (no transformers): tokenizer.json encodes as tiktoken."""
    tokenizers = pytest.importorskip("tokenizers")
    ht = tokenizers.Tokenizer.from_file(str(exported[0] / "tokenizer.json"))
    texts = paras[:400] + ["  leading spaces, tabs\t\tand\n\nnewlines ", "emoji 🎉👍🏽 東京 x²"]
    got = [e.ids for e in ht.encode_batch(texts, add_special_tokens=False)]
    assert sum(a == tok.encode(t) for a, t in zip(got, texts)) == len(texts)
    print(f"tokenizers library: identical ids on {len(texts)} texts")


@pytest.mark.extras                     # (safetensors and transformers, where installed)
def test_bert_and_ablation_checkpoints(tmp_path, tok, capsys):
    cfg, m = tiny_checkpoint(tmp_path / "bert.pt", tok, model="bert")
    r = run("--ckpt", tmp_path / "bert.pt", "--out", tmp_path / "b", capsys=capsys)
    assert r.returncode == 0, r.stderr
    c = json.loads((tmp_path / "b" / "config.json").read_text())
    assert c["architectures"] == ["ElectraForMaskedLM"] and c["hidden_size"] == 64
    if installed("safetensors.torch"):
        from safetensors.torch import load_file
        assert run("--ckpt", tmp_path / "bert.pt", "--out", tmp_path / "s", "--safetensors",
                   capsys=capsys).returncode == 0
        st = load_file(str(tmp_path / "s" / "model.safetensors"))
        bin_ = torch.load(tmp_path / "s" / "pytorch_model.bin", weights_only=True)
        assert st.keys() == bin_.keys() and all(torch.equal(st[k], bin_[k]) for k in st)
    r = run("--ckpt", tmp_path / "bert.pt", "--out", tmp_path / "b2", "--generator", capsys=capsys)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "has no generator" in r.stderr
    assert "Traceback" not in r.stderr
    if installed("transformers"):
        from transformers import ElectraForMaskedLM
        hf = ElectraForMaskedLM.from_pretrained(tmp_path / "b").eval()
        ids, pad = batch(tok, ["The river flows through the old city.", "A short one."])
        pos = torch.tensor([[1, 3, 5], [1, 2, 3]])
        with torch.no_grad():
            ours = m.mlm(ids, pos, pad)
            theirs = hf(input_ids=ids, attention_mask=pad.long()).logits
        theirs = theirs.gather(1, pos[..., None].expand(-1, -1, theirs.shape[-1]))
        assert (ours - theirs).abs().max().item() <= TOL
    # unigram generator: D exports, --generator is refused; embeddings stored under one owner
    ck = torch.load(tmp_path / "bert.pt", weights_only=True)
    _, e = tiny_checkpoint(tmp_path / "e.pt", tok)
    sd = {k: v for k, v in e.state_dict().items() if not k.startswith("generator.")}
    ck.update(model=sd | {"generator.probs": torch.ones(tok.vocab_size) / tok.vocab_size},
              config=dict(ck["config"], model="electra", generator="unigram"))
    for k in ("kind", "version"):
        ck.pop(k)
    save_checkpoint(tmp_path / "uni.pt", ck)
    r = run("--ckpt", tmp_path / "uni.pt", "--out", tmp_path / "u", "--generator", capsys=capsys)
    assert r.returncode == 1 and "no masked-LM generator" in r.stderr, r.stderr
    assert not (tmp_path / "u").exists()                            # checked before writing
    assert run("--ckpt", tmp_path / "uni.pt", "--out", tmp_path / "u", capsys=capsys).returncode == 0
    only_g = {k: v for k, v in e.state_dict().items() if not k.startswith(
        "discriminator.embeddings.")}                                # shared, stored once
    save_checkpoint(tmp_path / "g.pt", dict(ck, model=only_g, config=dict(ck["config"],
                                                                          generator="mlm")))
    export_hf.export(tmp_path / "g.pt", tmp_path / "gd", log=lambda *a: None)
    w = torch.load(tmp_path / "gd" / "pytorch_model.bin", weights_only=True)
    assert torch.equal(w["electra.embeddings.LayerNorm.bias"], e.generator.embeddings.norm.bias)
    ck["config"]["objective"] = "replace_mlm"                       # D is an MLM there
    save_checkpoint(tmp_path / "r.pt", dict(ck, model={k: v for k, v in sd.items()
                                                       if "head_" not in k}))
    r = run("--ckpt", tmp_path / "r.pt", "--out", tmp_path / "r", capsys=capsys)
    assert r.returncode == 1 and "replace_mlm" in r.stderr and r.stderr.count("\n") == 1
    r = run("--ckpt", tmp_path / "missing.pt", "--out", tmp_path / "x")   # the real CLI
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "no such" in r.stderr
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- with transformers

def test_hf_discriminator_and_generator_match_ours(exported, tok, paras):
    tr = pytest.importorskip("transformers")
    out, cfg, m = exported
    hd = tr.ElectraForPreTraining.from_pretrained(out).eval()
    hg = tr.ElectraForMaskedLM.from_pretrained(out / "generator").eval()
    ids, pad = batch(tok, paras[:8])
    with torch.no_grad():
        d_ours = m.discriminator(ids, pad)
        d_hf = hd(input_ids=ids, attention_mask=pad.long()).logits
        a, b = paras[8][:150], paras[9][:150]                       # a pair: token types 0 / 1
        x, seg = (torch.tensor([v]) for v in glue.encode_example(tok, a, b, max_len=64))
        h_ours = m.discriminator.hidden(x, None, seg)
        h_hf = hd.electra(input_ids=x, token_type_ids=seg).last_hidden_state
        pos = torch.stack([torch.randperm(int(n) - 2, generator=torch.Generator().manual_seed(i))
                           [:6] + 1 for i, n in enumerate(pad.sum(1))])
        x_masked = ids.scatter(1, pos, tok.mask_id)
        g_ours = m.generator(x_masked, pos, pad)
        g_hf = hg(input_ids=x_masked, attention_mask=pad.long()).logits
    g_hf = g_hf.gather(1, pos[..., None].expand(-1, -1, g_hf.shape[-1]))
    diffs = {"D logits": (d_ours - d_hf)[pad].abs().max().item(),
             "D hidden (pair)": (h_ours - h_hf).abs().max().item(),
             "G logits": (g_ours - g_hf).abs().max().item()}
    print(f"{int(pad.sum())} tokens; max abs diff: " +
          ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    assert all(v <= TOL for v in diffs.values()), diffs
    assert d_ours.abs().max() > 0.1 and g_ours.std() > 0.1            # not trivially zero


def test_hf_tokenizer_gives_our_ids(exported, tok, paras):
    tr = pytest.importorskip("transformers")
    out, _, m = exported
    auto = tr.AutoTokenizer.from_pretrained(out)
    fast = tr.PreTrainedTokenizerFast.from_pretrained(out / "generator")
    texts = paras[:300]
    for t in (auto, fast):
        assert [t(x, add_special_tokens=False)["input_ids"] for x in texts] == \
            [tok.encode(x) for x in texts]
        assert t(texts[0])["input_ids"] == [tok.cls_id] + tok.encode(texts[0]) + [tok.sep_id]
        enc = t(texts[1], texts[2])
        assert (enc["input_ids"], enc["token_type_ids"]) == \
            glue.encode_example(tok, texts[1], texts[2], max_len=10 ** 6)
        assert (t.pad_token_id, t.cls_token_id, t.sep_token_id, t.mask_token_id) == \
            (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)
        assert t.decode(tok.encode(texts[3])) == texts[3]
    # [MASK] takes the space before it: "is [MASK]." asks for one " word" token
    assert auto("It is [MASK].", add_special_tokens=False)["input_ids"] == \
        tok.encode("It is") + [tok.mask_id] + tok.encode(".")
    print(f"AutoTokenizer and PreTrainedTokenizerFast: identical ids on {len(texts)} texts + a pair")
    fill = tr.pipeline("fill-mask", model=str(out / "generator"), top_k=3)
    res = fill("The city is on the [MASK] of the river.")
    ids = torch.tensor([auto("The city is on the [MASK] of the river.")["input_ids"]])
    p = (ids[0] == tok.mask_id).nonzero()[0]
    with torch.no_grad():
        best = m.generator(ids, p[None], torch.ones_like(ids, dtype=torch.bool))[0, 0].argmax()
    assert len(res) == 3 and res[0]["token"] == int(best)

"""The reviewer's three questions: analysis/representations.py (linear CKA, linear probes, D
against BERT), analysis/token_groups.py (which tokens D distrusts) and their inspector commands,
compare and tokens, on tiny untrained checkpoints; and whitespace tokens shown visibly."""
import json

import numpy as np
import pytest
import torch

from analysis import analyses, representations as rep, token_groups as tg
from analysis import figure2 as fig2
from analysis import inspect_discriminator as insp
from conftest import run_cli, save_tiny
from data import load_tokenizer

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, learnable_data_dir):
    """An untrained tiny ELECTRA and BERT with the learnable data's tokenizer."""
    d, tok = tmp_path_factory.mktemp("ckpts"), load_tokenizer(learnable_data_dir)
    return save_tiny(d / "electra.pt", tok), save_tiny(d / "bert.pt", tok, model="bert"), tok


# ----------------------------------------------------------------------------- linear CKA

def test_cka_is_one_for_the_same_layer_up_to_rotation_and_scale():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 16, generator=g) @ torch.randn(16, 16, generator=g)   # correlated dims
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=g))                  # a rotation
    assert rep.linear_cka(x, x) == pytest.approx(1.0, abs=1e-9)
    assert rep.linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-9)
    assert rep.linear_cka(x, 3.0 * x @ q + 5.0) == pytest.approx(1.0, abs=1e-9)   # scale, shift
    # ... but not for any linear map: stretching one direction changes it
    stretch = torch.diag(torch.tensor([10.0] + [1.0] * 15))
    assert rep.linear_cka(x, x @ stretch) < 0.99


def test_cka_of_independent_noise_is_near_zero_and_symmetric():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4000, 16, generator=g), torch.randn(4000, 24, generator=g)
    assert 0 <= rep.linear_cka(x, y) < 0.02
    z = x[:, :8] + 0.1 * torch.randn(4000, 8, generator=g)        # half of x, a little noise
    assert rep.linear_cka(x, z) == pytest.approx(rep.linear_cka(z, x))
    assert 0.5 < rep.linear_cka(x, z) < 0.9


# ----------------------------------------------------------------------------- layers and probes

def test_layer_states_end_in_the_networks_own_hidden_states(ckpts):
    electra, bert = (insp.build_loaded(*insp.read_checkpoint(p, p)[1::-1], p) for p in ckpts[:2])
    x = torch.randint(5, 200, (2, 12))
    for net in (electra.discriminator, bert.mlm):
        states = rep.layer_states(net, x)
        assert [n for n, _ in states] == ["embeddings", "block 1 attention", "block 1 FFN",
                                          "block 2 attention", "block 2 FFN"]
        assert torch.allclose(states[-1][1], net.hidden(x), atol=1e-5)


def test_continues_word_is_a_piece_glued_to_the_one_before():
    toks = ["[CLS]", "The", " runn", "ing", " dog", ",", " 19", "90", " x", "[SEP]"]
    assert rep.continues_word(toks) == [False, False, False, True, False, False, False, True,
                                        False, False]


def test_probe_reads_a_linear_property_and_not_noise():
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(600, 8, generator=g)
    train = torch.arange(600) < 420
    acc, majority = rep.probe_accuracy(feats, (feats[:, 2] > 0).long().numpy(), train)
    assert acc > 0.95 and 0.3 < majority < 0.7
    noise = torch.randint(0, 2, (600,), generator=g).numpy()
    acc, majority = rep.probe_accuracy(feats, noise, train)
    assert acc < 0.65


# ----------------------------------------------------------------------------- token groups

def test_group_of_hand_worked():
    toks = ["[CLS]", "The", " cat", " sat", ".", " Then", " the", " runn", "ing", " 1990",
            " zebra", "\n", "Zebras", "[SEP]"]
    want = ["special", "function word", None, None, "punctuation", "sentence-initial",
            "function word",
            None, "continuation", "digits", None, "punctuation", "sentence-initial", "special"]
    assert [tg.group_of(toks, i) for i in range(len(toks))] == want
    assert "The" not in tg.FUNCTION_WORDS and "the" in tg.FUNCTION_WORDS   # compared lowercased
    assert tg.group_of(["[CLS]", "The"], 1) == "function word"             # after [CLS]: chunk


def test_token_groups_partition_the_tokens(ckpts, learnable_data_dir):
    tok = ckpts[2]
    text = "The cat sat on the mat. Then 1990 came, and the zebras ran!\nA dog barked."
    ids = [[tok.cls_id] + tok.encode(text) + [tok.sep_id], tok.encode("the the of zebra 7")]
    counts = np.bincount(np.concatenate(ids), minlength=tok.vocab_size) + \
        np.arange(tok.vocab_size) % 7                      # ties and distinct counts
    got = tg.groups(tok, ids, counts)
    assert [len(g) for g in got] == [len(s) for s in ids]
    flat = np.concatenate(got)
    assert ((flat >= 0) & (flat < len(tg.GROUPS))).all()   # every token in exactly one group
    # decile words: a more frequent word never lands in a rarer decile than a less frequent one
    d1 = tg.GROUPS.index("words d1")
    words = [(counts[i], g) for s, gs in zip(ids, got) for i, g in zip(s, gs) if g >= d1]
    for (ca, ga) in words:
        for (cb, gb) in words:
            assert not (ca > cb and ga > gb)


def test_token_table_counts_every_token_once(ckpts, learnable_data_dir):
    model, tok, cfg = insp.load(ckpts[0])
    seqs = [([tok.cls_id] + tok.encode("The cat sat on the mat. A dog barked at 7.") +
             [tok.sep_id], None)] * 6
    counts = np.ones(tok.vocab_size, dtype=int)
    with torch.inference_mode():
        rows, total = tg.token_table(model, tok, cfg, seqs, counts, rounds=2)
    assert sum(r["tokens"] for r in rows) == total["tokens"] == 2 * sum(len(s) for s, _ in seqs)
    # [CLS] and [SEP] are never masked (an untrained G may still sample a special token)
    assert rows[0]["group"] == "special" and rows[0]["tokens"] >= 2 * 2 * 6
    assert 0 < total["replaced_share"] < 0.5


# ----------------------------------------------------------------------------- command line

def test_compare_and_tokens_run_and_write_pngs_and_json(ckpts, learnable_data_dir, tmp_path,
                                                        capsys):
    electra, bert, _ = ckpts
    out = tmp_path / "out"
    common = ["--ckpt", str(electra), "--data", str(learnable_data_dir), "--n", "12",
              "--out", str(out), "--threads", "1"]
    assert insp.main(["compare", *common, "--bert", str(bert)]) == 0
    text = capsys.readouterr().out
    assert "linear CKA" in text and "continues a word" in text
    res = json.loads((out / "compare.json").read_text())
    cka = np.array(res["cka"])
    assert cka.shape == (5, 5) and ((cka >= 0) & (cka <= 1 + 1e-9)).all()
    assert set(res["probes"]) == {"identity", "position", "continuation"}
    assert insp.main(["tokens", *common]) == 0
    text = capsys.readouterr().out
    assert "function word" in text and "false alarms" in text
    res = json.loads((out / "tokens.json").read_text())
    assert [r["group"] for r in res["rows"]] == list(tg.GROUPS)
    for png in ("cka", "probes", "tokens"):
        assert (out / f"{png}.png").read_bytes()[:8] == PNG


def test_bad_input_to_compare_and_tokens_is_one_line(ckpts, learnable_data_dir, tmp_path,
                                                     capsys):
    electra, bert, _ = ckpts
    data = ["--data", str(learnable_data_dir)]
    cases = [(["compare", "--ckpt", electra, *data], "compare needs --bert"),
             (["compare", "--ckpt", electra, "--bert", electra, *data], "not a BERT"),
             (["compare", "--ckpt", electra, "--bert", bert], "--data DIR or --text FILE"),
             (["tokens", "--ckpt", electra], "--data DIR or --text FILE"),
             (["tokens", "--ckpt", electra, "--bert", bert, *data], "--bert is for"),
             (["compare", "--ckpt", bert, "--bert", bert, *data], "BERT checkpoint has no")]
    r = run_cli("analysis/inspect_discriminator.py", *cases[0][0], "--out", tmp_path / "o")
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and \
        r.stderr.startswith("error: compare needs --bert"), r.stderr
    for args, message in cases[1:]:
        assert insp.main([*map(str, args), "--out", str(tmp_path / "o")]) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and message in err[0], (args, err)
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- blanks shown

def test_whitespace_tokens_are_shown_visibly(ckpts):
    assert analyses.shown("\n") == "\\n" and analyses.shown(" ") == "␣"
    assert analyses.shown("  \n") == "␣␣\\n" and analyses.shown(" the") == "the"
    tok = ckpts[2]
    ids = [tok.encode("\n")[0], tok.encode(" the")[-1]]
    text = fig2.top_text(tok, torch.tensor(ids), torch.tensor([0.5, 0.25]))
    assert text == "'\\n' 0.50 | 'the' 0.25" and "''" not in text

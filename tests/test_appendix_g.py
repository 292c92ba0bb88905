"""ELECTRA as a masked language model (Appendix G): the score against hand-worked values, the
batched candidates against one-at-a-time D passes, the pick driven by D in the right direction,
and `analysis/inspect_discriminator.py mlm` on a tiny checkpoint, with its bad inputs."""
import json

import pytest
import torch

from analysis import appendix_g
from analysis import inspect_discriminator as insp
from machinery.checkpoint import save_checkpoint
from conftest import run_cli, save_tiny
from data import load_tokenizer

A = 0.85 / 0.15                         # a = (1 - p_mask) / p_mask at 15 % masking: 17 / 3


def score(d, p, mask_prob=0.15):
    return appendix_g.appendix_g_score(torch.tensor(d, dtype=torch.float64),
                                     torch.tensor(p, dtype=torch.float64), mask_prob)


# ----------------------------------------------------------------------------- the equation

def test_score_by_hand():
    # D = 0.5, p_G = 0.1: 0.05 / (17/3 * 0.5 + 0.1) = 0.05 * 30 / 88 = 1.5 / 88
    assert float(score(0.5, 0.1)) == pytest.approx(1.5 / 88, rel=1e-12)
    # p_mask = 0.5: a = 1. D = 0.8, p_G = 0.2: 0.16 / (0.2 + 0.2) = 0.4
    assert float(score(0.8, 0.2, 0.5)) == pytest.approx(0.4, rel=1e-12)
    # p_mask = 0.25: a = 3. D = 0.6, p_G = 0.3: 0.18 / (1.2 + 0.3) = 0.12
    assert float(score(0.6, 0.3, 0.25)) == pytest.approx(0.12, rel=1e-12)


def test_the_limits_d_to_one_and_d_to_zero():
    # D -> 1 ("certainly real"): p_G / p_G = 1, whatever G thought
    assert float(score(1.0, 0.01)) == 1.0
    assert float(score(1 - 1e-12, 0.01)) == pytest.approx(1 - A * 1e-10, rel=1e-12)
    # D -> 0 ("certainly replaced"): 0, however sure G was
    assert float(score(0.0, 0.9)) == 0.0
    assert float(score(1e-9, 0.3)) == pytest.approx(0.3e-9 / (A + 0.3), rel=1e-6)
    # D = 1 and p_G = 0 is 0/0 in the formula: no mass from G, no score - and never NaN
    assert float(score(1.0, 0.0)) == 0.0
    assert not torch.isnan(score([1.0, 0.0, 1.0], [0.0, 0.0, 1e-30])).any()


def test_the_optimal_d_gives_back_p_data():
    # The appendix's optimal D for a fixed G, D = p_data (a + p_G) / (a p_data + p_G), put into
    # the score returns p_data. By hand: p_data 0.3, p_G 0.1: D = 1.73 / 1.8, score 0.3.
    assert float(score(1.73 / 1.8, 0.1)) == pytest.approx(0.3, rel=1e-12)
    g = torch.Generator().manual_seed(0)
    for mask_prob in (0.15, 0.25, 0.5):
        a = (1 - mask_prob) / mask_prob
        p_data = torch.rand(1000, generator=g, dtype=torch.float64)
        p_g = torch.rand(1000, generator=g, dtype=torch.float64).clamp(min=1e-6)
        d = p_data * (a + p_g) / (a * p_data + p_g)
        assert torch.allclose(appendix_g.appendix_g_score(d, p_g, mask_prob), p_data, rtol=1e-9,
                              atol=1e-12)


def test_a_d_that_tells_nothing_apart_keeps_gs_ranking():
    p_g = torch.tensor([0.5, 0.2, 0.1, 0.05, 0.01])
    for d in (0.1, 0.5, 0.85, 0.99):
        s = appendix_g.appendix_g_score(torch.full_like(p_g, d), p_g)
        assert (s[:-1] > s[1:]).all(), d                  # same order as p_G
    # ... and a D that does tell them apart can overturn it: G's second choice, called real
    s = appendix_g.appendix_g_score(torch.tensor([0.2, 0.99]), torch.tensor([0.5, 0.2]))
    assert s.argmax() == 1


# ----------------------------------------------------------------------------- on a model

@pytest.fixture(scope="module")
def tok(learnable_data_dir):
    return load_tokenizer(learnable_data_dir)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tok):
    d = tmp_path_factory.mktemp("g")
    return save_tiny(d / "electra.pt", tok), save_tiny(d / "bert.pt", tok, "bert")


class StandInD(torch.nn.Module):
    """A discriminator that calls token `true_id` real and every other token replaced (or the
    reverse, `flip`), or says the same `const` logit everywhere."""

    def __init__(self, true_id=None, flip=False, const=None):
        super().__init__()
        self.true_id, self.flip, self.const = true_id, flip, const

    def forward(self, x, pad_mask=None, segment_ids=None):
        if self.const is not None:
            return torch.full(x.shape, self.const)
        real = (x == self.true_id) != self.flip
        return torch.where(real, -20.0, 20.0)       # the head's logit scores "replaced"


@torch.inference_mode()
def test_batched_candidates_equal_one_d_pass_per_candidate(ckpts, tok):
    model, _, cfg = insp.load(ckpts[0])
    g = torch.Generator().manual_seed(1)
    x = torch.randint(4, tok.vocab_size, (3, 12), generator=g)
    x[:, 0], x[:, -1] = tok.cls_id, tok.sep_id
    t = torch.tensor([1, 5, 10])
    cand, p_g, d_real, s = appendix_g.mlm_candidates(model, x, t, torch.ones_like(x, dtype=bool),
                                                   topk=7, mask_id=tok.mask_id)
    assert cand.shape == p_g.shape == d_real.shape == s.shape == (3, 7)
    assert (p_g[:, :-1] >= p_g[:, 1:]).all()                       # G's top-k, best first
    for b in range(3):
        for j in range(7):
            xc = x[b:b + 1].clone()
            xc[0, t[b]] = cand[b, j]                                # the candidate in place
            d = 1 - torch.sigmoid(model.discriminator(xc)[0, t[b]].float())
            assert float(d_real[b, j]) == pytest.approx(float(d), abs=1e-5)
    assert torch.allclose(s, appendix_g.appendix_g_score(d_real, p_g))


@torch.inference_mode()
def test_d_drives_the_pick_in_the_right_direction(ckpts, tok):
    """Every real token is the same id, so a stand-in D can know the answer: calling it real
    makes ELECTRA right whenever G's top-k holds it (accuracy = the upper bound); calling it
    replaced makes ELECTRA wrong; a D that says the same everywhere leaves G's answer."""
    model, _, cfg = insp.load(ckpts[0])
    true_id = 50
    seqs = [([tok.cls_id] + [true_id] * n + [tok.sep_id], None) for n in range(1, 30)]
    model.discriminator = StandInD(true_id)
    r = appendix_g.mlm_accuracy(model, tok, seqs, topk=tok.vocab_size)
    assert r["n"] == 29 and r["upper_acc"] == 1.0 and r["electra_acc"] == 1.0
    small = appendix_g.mlm_accuracy(model, tok, seqs, topk=3)
    assert small["electra_acc"] == small["upper_acc"] and small["g_acc"] <= small["upper_acc"]
    model.discriminator = StandInD(true_id, flip=True)
    assert appendix_g.mlm_accuracy(model, tok, seqs, topk=20)["electra_acc"] == 0.0
    model.discriminator = StandInD(const=0.3)
    r = appendix_g.mlm_accuracy(model, tok, seqs, topk=20)
    assert r["electra_acc"] == r["g_acc"] and r["fixed"] == r["broken"] == 0


# ----------------------------------------------------------------------------- command line

def test_mlm_prints_the_accuracies_and_the_sentence_view(ckpts, learnable_data_dir, tmp_path,
                                                         capsys):
    electra, bert = ckpts
    common = ["--ckpt", electra, "--data", learnable_data_dir, "--n", "6", "--topk", "10",
              "--out", tmp_path, "--threads", "1"]
    r = run_cli("analysis/inspect_discriminator.py", "mlm", *common, "--bert", bert)   # the real one
    assert r.returncode == 0, r.stderr
    assert "(a) G alone" in r.stdout and "(b) ELECTRA, Appendix G" in r.stdout
    assert "(c) true token in G's top-10" in r.stdout and "(d) BERT" in r.stdout
    res = json.loads((tmp_path / "mlm.json").read_text())
    assert res["n"] == 6 and res["topk"] == 10
    assert 0 <= res["electra_acc"] <= res["upper_acc"] <= 1 and res["g_acc"] <= res["upper_acc"]
    assert 0 <= res["bert_acc"] <= 1
    assert insp.main(["mlm", *map(str, common)]) == 0                      # without --bert
    out = capsys.readouterr().out
    assert "(b) ELECTRA" in out and "(d) BERT" not in out and "bert_acc" not in json.loads(
        (tmp_path / "mlm.json").read_text())
    assert insp.main(["mlm", "--ckpt", str(electra), "--bert", str(bert), "the cat sees the ball",
                      "--mask", "ball", "--topk", "5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[MASK]" in out and "Appendix G" in out and "BERT" in out
    heads = [l for l in out.splitlines() if "masked in:" in l]     # one per token of "ball"
    rows = [l for l in out.splitlines() if l[:3].strip().isdigit() and "(D " in l]
    assert heads and len(rows) == 5 * len(heads)
    assert out.count("the masked token") == len(heads)


def test_mlm_bad_input_is_one_line(ckpts, tok, learnable_data_dir, tmp_path, capsys):
    electra, bert = ckpts
    other = tmp_path / "other.pt"               # a BERT whose last two tokens are swapped
    lines = tok.to_text().splitlines()
    (a, i), (b, j) = lines[-2].split(), lines[-1].split()
    save_checkpoint(other, dict(torch.load(bert, weights_only=False),
                                tokenizer="\n".join(lines[:-2] + [f"{b} {i}", f"{a} {j}"]) + "\n"))
    data = ["--data", learnable_data_dir]
    cases = [(["mlm", "--ckpt", tmp_path / "missing.pt", *data], "no such checkpoint"),
             (["mlm", "--ckpt", bert, *data], "BERT"),
             (["mlm", "--ckpt", electra, *data, "--topk", "0"], "positive"),
             (["mlm", "--ckpt", electra, *data, "--n", "0"], "positive"),
             (["mlm", "--ckpt", electra, *data, "--topk", "100000"], "vocabulary"),
             (["mlm", "--ckpt", electra], "--data DIR or --text FILE"),
             (["mlm", "--ckpt", electra, "the cat sees"], "--mask"),
             (["mlm", "--ckpt", electra, *data, "--bert", electra], "not a BERT"),
             (["mlm", "--ckpt", electra, *data, "--bert", tmp_path / "nope.pt"], "no such"),
             (["mlm", "--ckpt", electra, *data, "--bert", other], "tokenizer"),
             (["calibration", "--ckpt", electra, *data, "--bert", bert], "compare commands only")]
    for args, message in cases[:1]:             # the real command line: exit status, stderr
        r = run_cli("analysis/inspect_discriminator.py", *args, "--out", tmp_path / "o")
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and \
            message in lines[0], (args, r.stderr)
    for args, message in cases[1:]:             # the same main(), in this process (faster)
        assert insp.main([*map(str, args), "--out", str(tmp_path / "o")]) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and message in err[0], (args, err)
    assert not (tmp_path / "o" / "mlm.json").exists()

"""analysis/inspect_discriminator.py: the metrics against hand-worked values, the Figure 2 trace, the
zero-shot rule, and every subcommand of the command line on a tiny random checkpoint."""
import json
import re

import numpy as np
import pytest
import torch

import objectives
from analysis import analyses
from analysis import figure2 as fig2
from analysis import inspect_discriminator as insp
from conftest import SHARED, one_token_discriminator, run_cli, save_tiny
from data import load_tokenizer

PNG = b"\x89PNG\r\n\x1a\n"


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and \
        "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, learnable_data_dir):
    """A freshly built (untrained) tiny ELECTRA checkpoint with the learnable data's tokenizer."""
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "ckpt.pt", load_tokenizer(learnable_data_dir))


@pytest.fixture
def loaded(tiny):
    """The checkpoint loaded afresh for each test: tests replace parts of the model (a stand-in
    D), so a shared copy would carry one test's changes into the next. Undoing a monkeypatch on
    an nn.Module's submodule is not reliable either: pytest 9 restores only what was in the
    instance's __dict__, and submodules live in _modules, so the undo deletes D."""
    return insp.load(tiny)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """A few CoLA / SST-2 dev rows in the standard layout (the real ones may be absent)."""
    d = tmp_path_factory.mktemp("glue")
    (d / "CoLA").mkdir()
    (d / "SST-2").mkdir()
    rows = [("the cat sees the ball .", 1), ("cat the the sees ball", 0),
            ("a dog likes the river .", 1), ("likes dog a river", 0)] * 3
    (d / "CoLA" / "dev.tsv").write_text("".join(f"src\t{y}\t\t{s}\n" for s, y in rows))
    (d / "SST-2" / "dev.tsv").write_text("sentence\tlabel\n" + "".join(
        f"{s} \t{y}\n" for s, y in [("a charming film", 1), ("dull and boring", 0)] * 5))
    return d


# ----------------------------------------------------------------------------- metrics

def test_ece_matches_a_hand_worked_example():
    # bins of width 0.1: {0.05 | y 0} -> |0 - 0.05|; {0.15, 0.12 | 1, 0} -> |1 - 0.27|;
    # {0.85 | 1} -> 0.15; {0.95 | 1} -> 0.05. ECE = (0.05 + 0.73 + 0.15 + 0.05) / 5 = 0.196
    e, bins = analyses.ece([0.05, 0.15, 0.12, 0.95, 0.85], [0, 1, 0, 1, 1], n_bins=10)
    assert e == pytest.approx(0.196)
    assert bins["count"] == [1, 2, 0, 0, 0, 0, 0, 0, 1, 1]
    assert bins["mean_p"][1] == pytest.approx(0.135) and bins["share_replaced"][1] == 0.5
    assert analyses.ece([1.0, 0.0], [1, 0])[0] == 0.0           # P = 1.0 lands in the top bin
    assert analyses.ece([0.3] * 10, [1] * 3 + [0] * 7)[0] == pytest.approx(0.0)


def test_roc_auc_by_hand_with_ties():
    assert analyses.roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # pairs (pos, neg): 0.5>0.2, 0.5=0.5 (half), 0.9>0.2, 0.9>0.5 -> 3.5 / 4
    assert analyses.roc_auc([0.2, 0.5, 0.5, 0.9], [0, 0, 1, 1]) == pytest.approx(0.875)
    assert analyses.roc_auc([0.5] * 4, [0, 1, 0, 1]) == pytest.approx(0.5)
    assert analyses.roc_auc([0.9, 0.1], [0, 1]) == 0.0
    assert analyses.roc_auc([0.1, 0.2], [1, 1]) is None


def test_best_mcc_picks_the_separating_threshold():
    mcc, t = analyses.best_mcc([0.9, 0.1, 0.3, 0.2, 0.4], [1, 0, 1, 0, 1])
    assert (mcc, t) == (pytest.approx(1.0), 0.3)            # "positive when score >= 0.3"
    rng = np.random.default_rng(0)
    s, y = rng.random(50), rng.integers(0, 2, 50)
    mcc, t = analyses.best_mcc(s, y)
    assert mcc == pytest.approx(max(analyses.matthews_corr((s >= u).astype(int), y) for u in s))
    assert analyses.matthews_corr((s >= t).astype(int), y) == pytest.approx(mcc)


# ----------------------------------------------------------------------------- Figure 2

def test_mask_items_are_token_indices_or_words():
    toks = ["[CLS]", "the", " che", "f", " cooked", " the", " meal", ".", "[SEP]"]
    assert fig2.choose_positions(toks, ["the", "cooked"]) == [1, 4]
    assert fig2.choose_positions(toks, ["chef", "the", "the"]) == [1, 2, 3, 5]
    assert fig2.choose_positions(toks, ["0", "5", ""]) == [1, 6]
    for bad in (["9"], ["pizza"], ["the", "the", "the"]):
        with pytest.raises(insp.InspectError):
            fig2.choose_positions(toks, bad)


def test_figure2_trace_labels_by_comparison_with_x(loaded, monkeypatch):
    model, tok, cfg = loaded
    with torch.inference_mode():
        tr = fig2.figure2_trace(model, tok, "the cat sees the ball", ["the", "sees"], k=3)
    x, m = tr["x"], tr["m"]
    assert (tr["x_masked"].gather(1, m) == tok.mask_id).all()
    assert torch.equal(tr["is_replaced"], tr["x_corrupt"] != x)
    outside = torch.ones_like(x, dtype=torch.bool).scatter(1, m, False)
    assert torch.equal(tr["x_corrupt"][outside], x[outside])
    assert torch.equal(tr["x_corrupt"].gather(1, m), tr["x_hat"])
    assert tr["top_p"].shape == (1, m.shape[1], 3) and (tr["p_replaced"] >= 0).all()
    # G "samples" the original token at the first position and another one at the rest:
    # the first is labelled real although it was masked (§2), the others replaced.
    orig = x.gather(1, m)
    other = (orig + 1) % (tok.vocab_size - 4)
    forced = torch.cat([orig[:, :1], other[:, 1:]], 1)
    monkeypatch.setattr(fig2, "sample", lambda logits, generator=None: forced)
    with torch.inference_mode():
        tr = fig2.figure2_trace(model, tok, "the cat sees the ball", ["the", "sees"])
    assert tr["is_replaced"].gather(1, m).tolist() == [[False] + [True] * (m.shape[1] - 1)]
    assert torch.equal(tr["is_replaced"], tr["x_corrupt"] != tr["x"])


def test_figure2_draw_is_the_step_of_one_step(loaded):
    """--mask draw: m is a training step's seeded 15 % draw, and the whole trace is the step
    teaching/one_step.py shows for the same text and seed (the table and the figure agree)."""
    from teaching import one_step
    model, tok, cfg = loaded
    text = "the cat sees the ball in the morning and the dog likes the river."
    for seed in (0, 3):
        with torch.inference_mode():
            tr = fig2.figure2_trace(model, tok, text, ["draw"], seed=seed, max_len=cfg.seq_len,
                                    mask_prob=cfg.mask_prob)
        step = one_step.one_step(model, tok, cfg, text, seed=seed)
        n = tr["x"].shape[1] - 2
        assert tr["m"][0].tolist() == step["m"] and len(step["m"]) == int(0.15 * n + 0.5)
        rows = step["rows"]
        assert [one_step.shown(tok, int(i)) for i in tr["x_masked"][0]] == rows["x_masked"]
        assert [one_step.shown(tok, int(i)) for i in tr["x_corrupt"][0]] == rows["x_corrupt"]
        assert tr["is_replaced"][0].int().tolist() == rows["is_replaced"]
        assert [f"{float(p):.2f}" for p in tr["p_replaced"][0]] == rows["p_replaced"]
        assert torch.equal(tr["x_corrupt"].gather(1, tr["m"]), tr["x_hat"])
    assert fig2.how_masked(["draw"], 3).startswith("m: the seeded 15 % draw")
    assert "chosen by hand (--mask the,sees)" in fig2.how_masked(["the", "sees"], 0)


def test_figure2_colours_mean_one_thing_each_and_have_a_legend(loaded):
    """Yellow only for a position in m (x_masked), red only for a replaced token, green and
    violet only for D's verdict: right and wrong; the legend names all four."""
    model, tok, cfg = loaded
    with torch.inference_mode():
        tr = fig2.figure2_trace(model, tok, "the cat sees the ball", ["the", "sees", "ball"])
    tr["p_replaced"] = torch.linspace(0.05, 0.95, tr["x"].shape[1])[None]   # D right and wrong
    fig = fig2.figure2_png(tok, tr, fig2.how_masked(["the", "sees", "ball"], 0))
    rgba = fig2.matplotlib.colors.to_rgba
    cells = fig.axes[0].tables[0].get_celld()
    m, seen = tr["m"][0].tolist(), set()
    for t in range(1, tr["x"].shape[1] - 1):
        rep, p = bool(tr["is_replaced"][0, t]), float(tr["p_replaced"][0, t])
        colour = [tuple(cells[t, c].get_facecolor()) for c in range(8)]
        assert (colour[1] == rgba(fig2.IN_M)) == (t in m)
        assert all((colour[c] == rgba(fig2.REPLACED)) == rep for c in (3, 4, 5))
        assert colour[7] == rgba(fig2.RIGHT if (p > 0.5) == rep else fig2.WRONG)
        for c, k in enumerate(colour):
            named = {v for v in ("IN_M", "REPLACED", "RIGHT", "WRONG")
                     if k == rgba(getattr(fig2, v))}
            assert named <= {1: {"IN_M"}, 3: {"REPLACED"}, 4: {"REPLACED"}, 5: {"REPLACED"},
                             7: {"RIGHT", "WRONG"}}.get(c, set()), (t, c, named)
            seen |= named
    assert seen == {"IN_M", "REPLACED", "RIGHT", "WRONG"}      # every meaning is on the figure
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 4 and any("in m" in t for t in legend) and \
        any("replaced" in t for t in legend) and any("right" in t for t in legend) and \
        any("wrong" in t for t in legend)
    insp.plt.close(fig)


@pytest.mark.parametrize("bad,expect", [("great", 0), ("terrible", 1)])
def test_zero_shot_picks_the_label_word_d_finds_least_replaced(loaded, bad, expect):
    model, tok, _ = loaded
    model.discriminator = one_token_discriminator(tok.encode(" " + bad)[0], 4.0)       # this test's own copy (see loaded)
    with torch.inference_mode():
        pred, scores = analyses.zero_shot(model, tok, ["a fine film", "it was dull", "x"],
                                      ["terrible", "great"], max_len=64)
    assert pred.tolist() == [expect] * 3 and scores.shape == (3, 2)
    assert (scores[:, 1 - expect] > scores[:, expect]).all()


def test_attention_maps_reproduce_each_blocks_attention(loaded):
    # The weights are recomputed outside the fused kernel; multiplied into v and projected they
    # must give exactly what the block's own attention computes, padding included.
    model = loaded[0]
    torch.manual_seed(1)
    x = torch.randint(4, model.discriminator.embeddings.token.num_embeddings, (3, 9))
    pad_mask = torch.ones_like(x, dtype=torch.bool)
    pad_mask[1, 6:] = False
    for net in (model.discriminator, model.generator):
        maps = analyses.attention_maps(net, x, pad_mask)
        h = net.encoder.proj(net.embeddings(x))
        assert len(maps) == len(net.encoder.blocks)
        for a, block in zip(maps, net.encoder.blocks):
            B, T, H = h.shape
            nh = block.attn.heads
            v = block.attn.qkv(h).view(B, T, 3, nh, H // nh)[:, :, 2].transpose(1, 2)
            ours = block.attn.out((a @ v).transpose(1, 2).reshape(B, T, H))
            ref = block.attn(h, pad_mask[:, None, None, :])
            assert torch.allclose(ours[pad_mask], ref[pad_mask], atol=1e-5)
            assert torch.allclose(a.sum(-1), torch.ones(B, nh, T))
            assert (a[1, :, :, 6:] == 0).all()                   # no weight on padding
            h = block(h, pad_mask[:, None, None, :])


def test_by_offset_hand_worked():
    # Head 0 reads the previous token (the first token reads itself), head 1 spreads evenly
    # over the real tokens. Sequence 1 has 6 real tokens, sequence 2 has 4 and 2 pads.
    T = 6
    pad_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    a = torch.zeros(2, 2, T, T)
    for b, n in enumerate((6, 4)):
        for t in range(n):
            a[b, 0, t, max(t - 1, 0)] = 1.0
            a[b, 1, t, :n] = 1.0 / n
    w, uniform = analyses.by_offset(a, pad_mask, offsets=(-1, 0, 1))
    assert uniform == pytest.approx((6 * (1 / 6) + 4 * (1 / 4)) / 10)        # 0.2
    # head 0: every query with a previous token puts all on it; offset 0 only at t = 0
    assert w[0].tolist() == pytest.approx([1.0, 2 / 10, 0.0])
    # head 1: 5 pairs at 1/6 and 3 pairs at 1/4 for offsets -1 and +1; 10 at 1/n for 0
    assert w[1].tolist() == pytest.approx([(5 / 6 + 3 / 4) / 8, 0.2, (5 / 6 + 3 / 4) / 8])


def test_offset_sums_pool_batches_of_different_sizes_exactly():
    # Two batches (3 sequences of 7 tokens, 1 of 5): pooling their sums must equal by_offset on
    # all four sequences at once, which averaging the two batch means would not.
    torch.manual_seed(0)
    a = torch.softmax(torch.randn(4, 2, 7, 7), -1)
    pad_mask = torch.ones(4, 7, dtype=torch.bool)
    pad_mask[3, 5:] = False
    a[3, :, :, 5:] = 0
    whole, uni = analyses.by_offset(a, pad_mask)
    parts = [analyses.offset_sums(a[:3], pad_mask[:3]), analyses.offset_sums(a[3:], pad_mask[3:])]
    pooled = (parts[0][0] + parts[1][0]) / (parts[0][1] + parts[1][1])
    assert torch.allclose(pooled, whole)
    assert (parts[0][2] + parts[1][2]) / (parts[0][3] + parts[1][3]) == pytest.approx(uni)
    halves = (analyses.by_offset(a[:3], pad_mask[:3])[0] +
              analyses.by_offset(a[3:], pad_mask[3:])[0]) / 2
    assert not torch.allclose(halves, whole)          # the old unweighted mean differs


# ----------------------------------------------------------------------------- command line

def test_every_subcommand_runs_and_writes_pngs_and_json(tiny, learnable_data_dir, glue_dir,
                                                         tmp_path, capsys):
    out = tmp_path / "out"
    common = ["--ckpt", str(tiny), "--out", str(out), "--threads", "1"]
    assert insp.main([*common, "the cat sees the ball", "--mask", "1,ball", "--color"]) == 0
    text = capsys.readouterr().out
    assert "\033[" in text and "top-5 of p_G" in text and "P(replaced)" in text
    assert insp.main(["figure2", *common]) == 0
    text = capsys.readouterr().out
    for name in ("x_masked", "p_G top-", "x̂ ~ p_G", "x_corrupt", "is_replaced", "D(x_corrupt,t)"):
        assert name in text
    data = ["--data", str(learnable_data_dir), "--n", "5", "--n_sentences", "20"]
    assert insp.main(["calibration", *common, *data]) == 0
    assert "ECE" in capsys.readouterr().out
    assert insp.main(["scoring", *common, *data]) == 0
    assert "shuffled" in capsys.readouterr().out
    assert insp.main(["attention", *common, *data]) == 0
    text = capsys.readouterr().out
    assert "discriminator's most neighbour-bound head" in text and "attention G layer 1" in text
    for cmd in ("cola", "sst2"):
        assert insp.main([cmd, *common, "--glue_dir", str(glue_dir)]) == 0
    assert "ROC-AUC" in capsys.readouterr().out
    for png in ("sentence", "figure2", "calibration", "cola_roc"):
        assert (out / f"{png}.png").read_bytes()[:8] == PNG
    # `all` through the real command line, with ../shared's GLUE dev sets when present
    real = SHARED / "data" / "glue"
    glue = real if (real / "CoLA").is_dir() and (real / "SST-2").is_dir() else glue_dir
    r = run_cli("analysis/inspect_discriminator.py", "all", *common, *data, "--glue_dir", glue)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "inspect.json").read_text())
    assert 0 <= res["calibration"]["ece"] <= 1 and res["calibration"]["n_sequences"] == 5
    assert res["cola"]["n"] == (1043 if glue == real else 12)
    assert 0 <= res["sst2"]["accuracy"] <= 1 and res["sst2"]["majority"] >= 0.5
    assert set(res["scoring"]) >= {"generator", "random", "shuffled"}
    d = res["attention"]["discriminator"]
    assert len(d["by_offset"]) == 2 and len(d["by_offset"][0]) == 2      # tiny: 2 layers x 2 heads
    assert d["neighbour_max"] == pytest.approx(d["neighbour_max_ratio"] * d["uniform"])
    assert set(res["seconds"]) >= {"calibration", "scoring", "cola", "sst2", "total"}


def test_text_file_is_held_out_text(tiny, tmp_path, capsys):
    f = tmp_path / "held.txt"
    f.write_text("The cat sees the ball in the morning. A dog likes the river.\n\n" * 30)
    assert insp.main(["calibration", "--ckpt", str(tiny), "--text", str(f), "--n", "5",
                      "--out", str(tmp_path)]) == 0
    assert "of 5 held-out sequences" in capsys.readouterr().out


def test_bad_input_is_one_line(tiny, learnable_data_dir, tmp_path, capsys):
    bert = save_tiny(tmp_path / "bert.pt", load_tokenizer(learnable_data_dir), model="bert")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    cases = [(["--ckpt", tmp_path / "missing.pt", "hello"], "no such checkpoint"),
             (["--ckpt", bert, "hello"], "BERT"),
             (["--ckpt", junk, "hello"], "cannot be read"),
             (["--ckpt", tiny, "   "], "give some text"),
             (["calibration", "--ckpt", tiny], "--data DIR or --text FILE"),
             (["scoring", "--ckpt", tiny, "--text", tmp_path / "none.txt"], "no such file"),
             (["figure2", "--ckpt", tiny, "some text"], "--mask"),
             (["--ckpt", tiny, "the cat", "--mask", "dog"], "no such"),
             (["--ckpt", tiny, "the cat", "--n", "0"], "positive"),
             (["cola", "--ckpt", tiny, "--glue_dir", tmp_path / "nope"], "no GLUE folder"),
             (["sst2", "--ckpt", tiny], "sst2 needs GLUE: give --glue_dir DIR"),
             # --text where nothing reads it (was ignored: figure2 drew another sentence)
             (["figure2", "--ckpt", tiny, "--text", tmp_path / "none.txt"],
              "figure2 takes its sentence as TEXT"),
             (["--ckpt", tiny, "the cat", "--text", tmp_path / "none.txt"], "--text FILE")]
    for args, message in cases[:2]:             # the real command line: exit status, stderr
        r = run_cli("analysis/inspect_discriminator.py", *args, "--out", tmp_path / "o")
        assert one_error_line(r) and message in r.stderr, (args, r.stderr)
    for args, message in cases[2:]:             # the same main(), in this process (faster)
        assert insp.main([*map(str, args), "--out", str(tmp_path / "o")]) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and message in err[0], (args, err)


def test_printed_figures_are_rounded_with_chance_beside_them(tiny, learnable_data_dir, tmp_path,
                                                             capsys):
    """calibration prints each figure rounded (no 0.6478708165125667) and what chance, or a D
    that answers "real" everywhere, would score beside it."""
    common = ["--ckpt", str(tiny), "--out", str(tmp_path / "o"), "--threads", "1",
              "--data", str(learnable_data_dir), "--n", "5"]
    assert insp.main(["calibration", *common]) == 0
    text = capsys.readouterr().out
    assert "chance 0.500" in text and "\"real\" everywhere: 0 %" in text and "at random:" in text
    assert not re.search(r"\d\.\d{5,}", text), text          # nothing past 4 decimals
    res = {"ece": 0.01234567, "n_tokens": 1000, "n_sequences": 3, "share_replaced": 0.1234567,
           "mean_p_replaced": 0.2, "token_auc": 0.6478708165125667,
           "recall_at_0_5": 0.04851752021563342, "precision_at_0_5": None}
    lines = analyses.calibration_summary(res, 10)
    assert "0.648" in lines and "4.9 %" in lines and "12.3 %" in lines and "0.0123" in lines


def test_figure2_takes_its_sentence_from_the_checkpoints_own_held_out_text(
        tiny, learnable_data_dir, tmp_path, capsys):
    """Without TEXT, figure2 with --data draws a validation sentence and masks it as
    pre-training does (round(15 % of n) positions, at least 1, seeded: the same twice), and says
    which; without --data it says it uses the paper's example."""
    common = ["figure2", "--ckpt", str(tiny), "--out", str(tmp_path / "o"), "--threads", "1"]
    runs = []
    for _ in range(2):
        assert insp.main([*common, "--data", str(learnable_data_dir)]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] and "validation split" in runs[0] and "--mask draw" in runs[0]
    n_real = len(re.search(r"^x +(.*)$", runs[0], re.M)[1].split()) - 2
    k = len(re.search(r"^m +tensor\(\[\[([\d, ]*)\]\]\)", runs[0], re.M)[1].split(","))
    assert k == max(1, int(np.floor(0.15 * n_real + 0.5))) and 5 <= n_real <= 40
    assert insp.main(common) == 0
    assert "the paper's example sentence" in capsys.readouterr().out


def test_a_command_that_writes_nothing_leaves_no_folder(tiny, learnable_data_dir, tmp_path):
    out = tmp_path / "never"
    assert insp.main(["attention", "--ckpt", str(tiny), "--out", str(out), "--threads", "1",
                      "--data", str(learnable_data_dir), "--n", "3"]) == 0
    assert not out.exists()


def test_a_mistyped_command_is_refused_not_shown_as_text(tiny, tmp_path, capsys):
    """A first word close to a command (alone, or before a quoted sentence) is a typo: one
    line naming the command, exit 1, nothing written. Several words, a quoted sentence, or
    `show WORD` stay text, as before."""
    out = tmp_path / "o"
    common = ["--ckpt", str(tiny), "--out", str(out), "--threads", "1"]
    for words, meant in ((["attentoin"], "attention"), (["figre2", "the chef cooked"], "figure2"),
                         (["Callibration"], "calibration")):
        assert insp.main([*words, *common]) == 1, words
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0] == (
            f"error: {words[0]!r} is not a command; did you mean {meant!r}? (to inspect text, "
            f"quote a sentence, or write show {words[0]})"), err
        assert not out.exists()
    for words, n_tokens in ((["show", "attentoin"], len(insp.load(tiny)[1].encode("attentoin"))),
                            (["attention is all you need"], None), (["call", "me", "later"], None),
                            (["hello"], None)):
        assert insp.main([*words, *common]) == 0, words
        text = capsys.readouterr().out
        assert text.startswith("D on the text as typed"), (words, text)
        if n_tokens:
            assert f"{n_tokens} tokens" in text


def test_drawn_mask_on_a_short_text_masks_as_training_does(loaded, monkeypatch):
    """--mask draw on a text of any length masks k = round(0.15 n) real tokens, at least 1 -
    objectives.mask_tokens' rule, whose slot count once left a short text unmasked - and
    draws the same step as teaching/one_step.py; a text with no real token is one line."""
    from teaching import one_step
    model, tok, cfg = loaded
    words = "the cat sees the ball in the morning and the dog likes the river".split()
    seen = set()
    for n_words in range(1, len(words) + 1):
        text = " ".join(words[:n_words])
        with torch.inference_mode():
            tr = fig2.figure2_trace(model, tok, text, ["draw"], seed=n_words, max_len=cfg.seq_len,
                                    mask_prob=cfg.mask_prob)
        n = tr["x"].shape[1] - 2
        k = max(1, int(np.floor(0.15 * n + 0.5)))
        assert tr["m"].shape[1] == k and (tr["x_masked"].gather(1, tr["m"]) != tr["x"].gather(
            1, tr["m"])).sum() <= k, (text, tr["m"])
        assert tr["m"][0].tolist() == one_step.one_step(model, tok, cfg, text, seed=n_words)["m"]
        seen.add(k > objectives.mask_slots(n + 2, cfg.mask_prob))
    assert seen == {True, False}          # short texts the old slot count under-masked, and not
    monkeypatch.setattr(fig2, "encode", lambda tok, text, max_len: [tok.cls_id, tok.sep_id])
    with pytest.raises(insp.InspectError, match="no token to mask"):
        fig2.figure2_trace(model, tok, "x", ["draw"])


def test_figure2_draw_on_a_short_text_from_the_command_line(tiny, tmp_path, capsys):
    """The README's `figure2 --ckpt C "TEXT" --mask draw` on a text of 2 tokens (4 positions
    with [CLS] and [SEP]: mask_slots(4) = 0): one token in m, as training would mask."""
    assert insp.main(["figure2", "--ckpt", str(tiny), "the", "--mask", "draw",
                      "--out", str(tmp_path / "o"), "--threads", "1"]) == 0
    text = capsys.readouterr().out
    x = re.search(r"^x +(.*)$", text, re.M)
    m = re.search(r"^m +tensor\(\[\[(\d+)\]\]\)", text, re.M)
    assert x and len(x[1].split()) == 4 and m and 1 <= int(m[1]) <= 2, text


def with_data_dir(src, dst, data_dir):
    """A copy of checkpoint src recording data_dir, as train.py records its --data."""
    from machinery.checkpoint import save_checkpoint
    ckpt = torch.load(src, weights_only=True)
    ckpt["data_dir"] = str(data_dir)
    save_checkpoint(dst, ckpt)
    return dst


def test_held_out_text_defaults_to_the_checkpoints_own_data_folder(tiny, learnable_data_dir,
                                                                  tmp_path, capsys):
    """Without --data and --text the analyses read the validation split of the data folder
    the checkpoint records, and say so; a recorded folder that is gone is named in the error."""
    own = with_data_dir(tiny, tmp_path / "own.pt", learnable_data_dir)
    common = ["--out", str(tmp_path / "o"), "--threads", "1", "--n", "3"]
    assert insp.main(["attention", "--ckpt", str(own), *common]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith(
        f"held-out text: the validation split of {learnable_data_dir}, the data folder this "
        "checkpoint was trained on") and "discriminator's most neighbour-bound head" in text
    assert insp.main(["calibration", "--ckpt", str(own), *common]) == 0
    assert "of 3 held-out sequences" in capsys.readouterr().out
    # figure2 without TEXT takes its sentence from there too; the paper's where it is gone
    assert insp.main(["figure2", "--ckpt", str(own), *common]) == 0
    assert f"of {learnable_data_dir}'s validation split" in capsys.readouterr().out
    gone = with_data_dir(tiny, tmp_path / "gone.pt", tmp_path / "data" / "demo-8192")
    for cmd, message in (("attention", "this analysis needs held-out text"),
                         ("mlm", "mlm needs held-out text")):
        assert insp.main([cmd, "--ckpt", str(gone), *common, "--out", str(tmp_path / "n")]) \
            == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and \
            f"the checkpoint's own data folder {tmp_path / 'data' / 'demo-8192'} is gone" in err[0]
    assert not (tmp_path / "n").exists()
    assert insp.main(["figure2", "--ckpt", str(gone), *common]) == 0
    assert "the paper's example sentence" in capsys.readouterr().out

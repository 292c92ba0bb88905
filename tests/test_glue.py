"""Tests for glue.py: metrics against hand-worked values, the readers of all 8 task layouts,
bad files, truncation and segment ids, and the both-orders augmentation. No model, no torch."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import glue  # noqa: E402
from glue import GlueError  # noqa: E402

# ----------------------------------------------------------------------------- metrics


def test_accuracy_and_f1_by_hand():
    assert glue.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # tp = 2 (items 0, 4), fp = 1 (item 1), fn = 1 (item 3): F1 = 2*2 / (2*2 + 1 + 1) = 2/3
    assert glue.f1_score([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == pytest.approx(2 / 3)
    assert glue.f1_score([0, 0], [0, 0]) == 0.0          # nothing to find, nothing predicted
    assert glue.f1_score([0, 0, 0], [1, 0, 1]) == 0.0


def test_matthews_by_hand():
    # tp 2, tn 1, fp 1, fn 1: (2*1 - 1*1) / sqrt(3 * 3 * 2 * 2) = 1/6
    assert glue.matthews_corr([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == pytest.approx(1 / 6)
    assert glue.matthews_corr([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert glue.matthews_corr([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_matthews_all_one_class_is_zero():
    # a constant prediction makes a factor of the denominator 0: MCC is defined as 0, not NaN
    assert glue.matthews_corr([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0
    assert glue.matthews_corr([0, 0, 0, 0], [1, 0, 1, 0]) == 0.0
    assert glue.matthews_corr([1, 0, 1, 0], [1, 1, 1, 1]) == 0.0


def test_ranks_with_ties_are_averaged():
    assert glue.rank_average([10, 20, 20, 30, 20]).tolist() == [1, 3, 3, 5, 3]
    assert glue.rank_average([3.0, 1.0, 2.0]).tolist() == [3, 1, 2]


def test_spearman_and_pearson_by_hand():
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]: deviations [-1.5, 0, 0, 1.5] and
    # [-1.5, .5, -.5, 1.5]; rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert glue.spearman_corr([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(np.sqrt(0.9))
    assert glue.spearman_corr([1, 2, 3, 4], [1, 4, 9, 100]) == pytest.approx(1.0)  # monotone
    # x = [1, 2, 3], y = [2, 4, 7]: r = 5 / sqrt(2 * 114 / 9) = 15 / sqrt(228)
    assert glue.pearson_corr([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / np.sqrt(228))
    assert glue.pearson_corr([1, 1, 1], [1, 2, 3]) == 0.0    # constant side: 0, not NaN


def test_task_metrics_keys():
    assert set(glue.task_metrics("cola", [1, 0], [1, 0])) == {"mcc", "acc"}
    assert set(glue.task_metrics("stsb", [1.0, 2.0], [1.5, 2.5])) == {"spearman", "pearson"}
    assert set(glue.task_metrics("mrpc", [1, 0], [1, 0])) == {"acc", "f1"}
    assert set(glue.task_metrics("qqp", [1, 0], [1, 0])) == {"acc", "f1"}
    assert set(glue.task_metrics("rte", [1, 0], [1, 0])) == {"acc"}


# ----------------------------------------------------------------------------- readers

BOM = "\ufeff"
MNLI_TRAIN_HEAD = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
                   "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI_DEV_HEAD = MNLI_TRAIN_HEAD.replace("label1\tgold_label", "label1\tlabel2\tlabel3\tlabel4"
                                        "\tlabel5\tgold_label")


def mnli_row(i, a, b, label, dev):
    labels = "\t".join([label] * (5 if dev else 1))
    return f"{i}\t1\t1e\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{a}\t{b}\t{labels}\t{label}"


def layouts(a, b, y, i):
    """One row of each task, with sentences a, b and a binary label y (STS-B: a score)."""
    nli3 = ["contradiction", "entailment", "neutral"][i % 3]
    nli2 = ["entailment", "not_entailment"][y]
    return {
        "CoLA": f"gj04\t{y}\t\t{a}",
        "SST-2": f"{a}\t{y}",
        "MRPC": f"{y}\t{100 + i}\t{200 + i}\t{a}\t{b}",
        "STS-B": f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{5.0 * y:.3f}",
        "QQP": f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{y}",
        "MNLI": (mnli_row(i, a, b, nli3, False), mnli_row(i, a, b, nli3, True)),
        "QNLI": f"{i}\t{a}\t{b}\t{nli2}",
        "RTE": f"{i}\t{a}\t{b}\t{nli2}",
    }


HEADERS = {"CoLA": None, "SST-2": "sentence\tlabel",
           "MRPC": BOM + "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
           "STS-B": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                    "sentence2\tscore",
           "QQP": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
           "MNLI": (MNLI_TRAIN_HEAD, MNLI_DEV_HEAD), "QNLI": "index\tquestion\tsentence\tlabel",
           "RTE": "index\tsentence1\tsentence2\tlabel"}


def write_glue(root, rows_a, rows_b, labels, folders=None, dev_rows=None):
    """A GLUE folder in the standard layout, every task holding the same given examples."""
    dev_rows = dev_rows or (rows_a, rows_b, labels)
    for folder in folders or HEADERS:
        d = root / folder
        d.mkdir(parents=True, exist_ok=True)
        splits = ["train.tsv"] + (["dev_matched.tsv", "dev_mismatched.tsv"] if folder == "MNLI"
                                  else ["dev.tsv"])
        for split in splits:
            dev = split != "train.tsv"
            a_s, b_s, ys = dev_rows if dev else (rows_a, rows_b, labels)
            lines = []
            head = HEADERS[folder]
            if isinstance(head, tuple):
                head = head[dev]
            if head is not None:
                lines.append(head)
            for i, (a, b, y) in enumerate(zip(a_s, b_s, ys)):
                row = layouts(a, b, y, i)[folder]
                lines.append(row[dev] if isinstance(row, tuple) else row)
            (d / split).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


A = ["The cat sat on the mat.", '"Quoted," she said, starting a row with a quote.',
     "A third sentence here."]
B = ["A cat was sitting.", "Nobody spoke.", '"Another quote']
Y = [1, 0, 1]


def test_every_task_layout_reads(tmp_path):
    write_glue(tmp_path, A, B, Y)
    for name, task in glue.TASKS.items():
        train, devs = glue.read_task(tmp_path, name)
        assert len(train) == 3, name                   # the quote rows did not merge any rows
        assert [e.a for e in train] == A, name
        assert [e.b for e in train] == (B if task.b is not None else [None] * 3), name
        expect = ["dev_matched", "dev_mismatched"] if name == "mnli" else ["dev"]
        assert sorted(devs) == expect, name
        if name == "stsb":
            assert [e.label for e in train] == [5.0, 0.0, 5.0]
        elif name == "mnli":                          # contradiction, entailment, neutral
            assert [e.label for e in train] == [0, 1, 2]
        else:                        # QNLI / RTE: entailment = 0, not_entailment = 1
            assert [e.label for e in train] == Y, name


def test_bom_and_no_header(tmp_path):
    write_glue(tmp_path, A, B, Y, ["MRPC", "CoLA"])
    assert (tmp_path / "MRPC" / "train.tsv").read_bytes().startswith(b"\xef\xbb\xbf")
    assert glue.read_split(tmp_path, "mrpc", "train.tsv")[0].label == 1
    # CoLA's first line is data, not a header: all three rows are examples
    assert len(glue.read_split(tmp_path, "cola", "dev.tsv")) == 3


def test_quote_row_does_not_merge_rows(tmp_path):
    d = tmp_path / "RTE"
    d.mkdir()
    rows = ["index\tsentence1\tsentence2\tlabel", '0\t"He said so.\tIt was said.\tentailment',
            '1\tplain\t"unterminated\tnot_entailment', "2\tlast\trow\tentailment"]
    (d / "train.tsv").write_text("\n".join(rows) + "\n")
    ex = glue.read_split(tmp_path, "rte", "train.tsv")
    assert [e.a for e in ex] == ['"He said so.', "plain", "last"]
    assert [e.label for e in ex] == [0, 1, 0]


def test_real_glue_row_counts():
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "..", "shared", "data", "glue")
    if not os.path.isdir(root):
        pytest.skip("../shared/data/glue is absent (real GLUE data only on the dev machine)")
    counts = {"cola": (8551, 1043), "sst2": (67349, 872), "mrpc": (3668, 408),
              "stsb": (5749, 1500), "rte": (2490, 277)}
    for name, (n_train, n_dev) in counts.items():
        train, devs = glue.read_task(root, name)
        assert (len(train), len(devs["dev"])) == (n_train, n_dev), name


@pytest.mark.parametrize("bad, where, what", [
    ("1\t2\t3\tentailment\textra", 3, "columns"),           # wrong column count
    ("1\tonly two", 3, "columns"),
    ("1\ta\tb\tmaybe", 3, "bad label"),                      # a label outside the task's set
])
def test_malformed_rows_name_file_and_line(tmp_path, bad, where, what):
    d = tmp_path / "RTE"
    d.mkdir()
    (d / "train.tsv").write_text(f"index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n{bad}\n")
    with pytest.raises(GlueError) as e:
        glue.read_split(tmp_path, "rte", "train.tsv")
    msg = str(e.value)
    assert f"{d / 'train.tsv'}:{where}:" in msg and what in msg and "\n" not in msg


def test_bad_score_and_empty_split_and_wrong_layout(tmp_path):
    write_glue(tmp_path, A, B, Y, ["STS-B", "SST-2", "RTE"])
    p = tmp_path / "STS-B" / "train.tsv"
    p.write_text(p.read_text().replace("5.000", "high", 1))
    with pytest.raises(GlueError, match=r"train\.tsv:2: bad score"):
        glue.read_split(tmp_path, "stsb", "train.tsv")
    (tmp_path / "SST-2" / "dev.tsv").write_text("sentence\tlabel\n\n")          # header only
    with pytest.raises(GlueError, match="no examples"):
        glue.read_split(tmp_path, "sst2", "dev.tsv")
    # an SST-2 file where RTE's should be: caught at the header, not trained on
    (tmp_path / "RTE" / "dev.tsv").write_text("sentence\tlabel\ngood movie\t1\n")
    with pytest.raises(GlueError, match=r"dev\.tsv:1: unexpected header"):
        glue.read_split(tmp_path, "rte", "dev.tsv")
    (tmp_path / "RTE" / "train.tsv").unlink()
    with pytest.raises(GlueError, match="file missing"):
        glue.read_task(tmp_path, "rte")
    with pytest.raises(GlueError, match="no such folder"):
        glue.read_task(tmp_path, "qnli")


def test_cola_header_line_is_a_bad_label(tmp_path):
    d = tmp_path / "CoLA"
    d.mkdir()
    (d / "train.tsv").write_text("source\tlabel\tmark\tsentence\ngj04\t1\t\tOK.\n")
    with pytest.raises(GlueError, match=r"train\.tsv:1: bad label"):
        glue.read_split(tmp_path, "cola", "train.tsv")


def test_windows_line_endings(tmp_path):
    d = tmp_path / "SST-2"
    d.mkdir()
    (d / "train.tsv").write_bytes(b"sentence\tlabel\r\nfine film\t1\r\nbad film\t0\r\n")
    assert [e.label for e in glue.read_split(tmp_path, "sst2", "train.tsv")] == [1, 0]


# ----------------------------------------------------------------------------- inputs

class WordTok:
    """A stand-in tokenizer: one id per word (its length), specials 100 / 101."""
    cls_id, sep_id, pad_id = 100, 101, 0

    def encode(self, text):
        return [len(w) for w in text.split()]

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]


def test_truncate_longest_first():
    a, b = glue.truncate_pair(list(range(10)), [7, 7, 7, 7], 8)
    assert a == [0, 1, 2, 3] and b == [7, 7, 7, 7]        # only the longer part lost tokens
    a, b = glue.truncate_pair([1] * 5, [2] * 5, 7)       # ties drop from b: 5,4 -> 4,4 -> 4,3
    assert (len(a), len(b)) == (4, 3)
    a, b = glue.truncate_pair([1, 2], [3], 10)           # fits: unchanged
    assert (a, b) == ([1, 2], [3])


def test_pair_and_single_inputs_and_segments():
    tok = WordTok()
    ids, seg = glue.encode_example(tok, "aa bbb", "c dddd e")
    assert ids == [100, 2, 3, 101, 1, 4, 1, 101]
    assert seg == [0, 0, 0, 0, 1, 1, 1, 1]
    ids, seg = glue.encode_example(tok, "aa bbb")
    assert ids == [100, 2, 3, 101] and seg == [0, 0, 0, 0]
    # 200 + 10 words into 128 tokens: 3 specials, b keeps its 10, a keeps 115
    ids, seg = glue.encode_example(tok, "x " * 200, "y " * 10)
    assert len(ids) == 128 and seg.count(1) == 11 and ids[-1] == 101 and ids[116] == 101
    ids, _ = glue.encode_example(tok, "x " * 300)
    assert len(ids) == 128 and ids[0] == 100 and ids[-1] == 101
    (batch, labels) = glue.encode_examples(tok, [glue.Example("aa bbb", "c dddd e", 1)])
    assert batch[0] == ([100, 2, 3, 101, 1, 4, 1, 101], [0, 0, 0, 0, 1, 1, 1, 1])
    assert labels.tolist() == [1.0]


def test_both_orders_doubles_mrpc_and_stsb(tmp_path):
    write_glue(tmp_path, A, B, Y, ["MRPC", "STS-B"])
    for name in ("mrpc", "stsb"):
        assert glue.TASKS[name].both_orders
        train, _ = glue.read_task(tmp_path, name)
        aug = glue.both_orders(train)
        assert len(aug) == 2 * len(train) == 6
        assert [(e.a, e.b) for e in aug[3:]] == [(e.b, e.a) for e in train]
        assert [e.label for e in aug[3:]] == [e.label for e in train]
    assert not any(glue.TASKS[t].both_orders for t in glue.TASKS if t not in ("mrpc", "stsb"))


def test_table7_epochs():
    assert {t: glue.TASKS[t].epochs for t in glue.TASKS} == dict(
        cola=3, sst2=3, mrpc=3, stsb=10, qqp=3, mnli=3, qnli=3, rte=10)


def test_mnli_column_counts_differ_by_split(tmp_path):
    write_glue(tmp_path, A, B, Y, ["MNLI"])
    train = (tmp_path / "MNLI" / "train.tsv").read_text()
    (tmp_path / "MNLI" / "dev_mismatched.tsv").write_text(train)     # 12 columns, needs 16
    with pytest.raises(GlueError, match=r"dev_mismatched\.tsv:1: unexpected header"):
        glue.read_task(tmp_path, "mnli")
    (tmp_path / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(GlueError, match=r"dev_mismatched\.tsv: file missing"):
        glue.read_task(tmp_path, "mnli")


def test_summarize_median_and_spread_over_seeds():
    runs = [{"seed": s, "metrics": {"acc": a, "f1": f}, "time_s": 1.0}
            for s, (a, f) in enumerate([(0.6, 0.7), (0.5, 0.9), (0.7, 0.8), (0.9, 0.1)])]
    r = glue.summarize(runs[:3], "acc")
    assert r["metric"] == "acc" and r["seeds"] == runs[:3]
    assert r["median"] == {"acc": 0.6, "f1": 0.8}
    assert r["spread"] == {"acc": [0.5, 0.7], "f1": [0.7, 0.9]}
    assert glue.summarize(runs, "acc")["median"]["acc"] == pytest.approx(0.65)   # even: mean of 2

"""GLUE: the eight tasks of the paper's evaluation (§3.1, Appendix C), their readers and metrics.

The paper reports Matthews correlation for CoLA, Spearman correlation for STS and accuracy
for the others (§3.1), without WNLI (Appendix B).

Details: this code adds CoLA's accuracy, MNLI's mismatched accuracy, F1 for MRPC and QQP and
Pearson for STS-B, in numpy alone. The files are GLUE's standard layout
(GLUE_DIR/CoLA/train.tsv ...).
"""
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class GlueError(Exception):
    """Engineering: bad GLUE input the user can fix; the command line prints one line and
    exits 1."""


@dataclass(frozen=True)
class Task:
    folder: str                 # folder name inside GLUE_DIR
    a: int                      # column of the first sentence
    b: int                      # column of the second sentence (None: single-sentence task)
    label: int                  # column of the label (-1: the last one)
    columns: dict               # split file -> expected number of columns
    labels: tuple = None        # class names in file order; None: regression (STS-B)
    header: str = None          # expected name of the label column in the header; None: no header
    metric: str = "acc"         # the paper's number for this task
    epochs: int = 3             # Table 7: 10 for RTE and STS, 3 for the other tasks
    both_orders: bool = False   # train on (a, b) and (b, a): the official code's augmentation

    @property
    def regression(self):
        return self.labels is None

    @property
    def dev_files(self):
        return [f for f in self.columns if f != "train.tsv"]


NLI3 = ("contradiction", "entailment", "neutral")
NLI2 = ("entailment", "not_entailment")
TASKS = {   # in the order of the paper's tables
    "cola": Task("CoLA", 3, None, 1, {"train.tsv": 4, "dev.tsv": 4}, ("0", "1"), metric="mcc"),
    "sst2": Task("SST-2", 0, None, 1, {"train.tsv": 2, "dev.tsv": 2}, ("0", "1"), "label"),
    "mrpc": Task("MRPC", 3, 4, 0, {"train.tsv": 5, "dev.tsv": 5}, ("0", "1"), "Quality",
                 both_orders=True),
    "stsb": Task("STS-B", 7, 8, 9, {"train.tsv": 10, "dev.tsv": 10}, None, "score",
                 metric="spearman", epochs=10, both_orders=True),
    "qqp": Task("QQP", 3, 4, 5, {"train.tsv": 6, "dev.tsv": 6}, ("0", "1"), "is_duplicate"),
    "mnli": Task("MNLI", 8, 9, -1, {"train.tsv": 12, "dev_matched.tsv": 16,
                                    "dev_mismatched.tsv": 16}, NLI3, "gold_label"),
    "qnli": Task("QNLI", 1, 2, 3, {"train.tsv": 4, "dev.tsv": 4}, NLI2, "label"),
    "rte": Task("RTE", 1, 2, 3, {"train.tsv": 4, "dev.tsv": 4}, NLI2, "label", epochs=10),
}


# ----------------------------------------------------------------------------- reading

def read_tsv(path, n_columns, header=None, label_col=-1):
    """Rows of a GLUE .tsv as (1-based line number, list of fields).

    Engineering: split on tabs with *no* quote handling (an RTE sentence starts with a quote,
    which a CSV reader would take for a quoted field); 'utf-8-sig' drops MRPC's byte-order
    mark. `header`, the expected name of the label column (None: no header, like CoLA),
    catches a file of another task."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise GlueError(f"{path}: file missing (expected the standard GLUE layout)") from None
    except UnicodeDecodeError as e:
        raise GlueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise GlueError(f"{path}: cannot read ({e.strerror or e})") from None
    rows, need_header = [], header is not None
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue                                   # the trailing newline, stray blank lines
        fields = line.split("\t")
        if need_header:
            if len(fields) != n_columns or fields[label_col] != header:
                raise GlueError(f"{path}:{lineno}: unexpected header {line[:60]!r}: expected "
                                f"{n_columns} tab-separated columns with {header!r}; is this "
                                "the standard GLUE layout?")
            need_header = False
            continue
        if len(fields) != n_columns:
            raise GlueError(f"{path}:{lineno}: expected {n_columns} tab-separated columns, "
                            f"found {len(fields)}")
        rows.append((lineno, fields))
    if not rows:
        raise GlueError(f"{path}: no examples (empty split)")
    return rows


@dataclass
class Example:
    a: str
    b: str          # None for single-sentence tasks
    label: float    # class index, or the 0-5 similarity score for STS-B


def read_split(glue_dir, name, split_file):
    """The examples of one split file of task `name`, labels parsed and checked."""
    t = TASKS[name]
    path = Path(glue_dir) / t.folder / split_file
    out = []
    for lineno, f in read_tsv(path, t.columns[split_file], t.header, t.label):
        raw = f[t.label].strip()
        if t.regression:
            try:
                label = float(raw)
                assert 0.0 <= label <= 5.0
            except (ValueError, AssertionError):
                raise GlueError(f"{path}:{lineno}: bad score {raw[:40]!r} (need a number "
                                "from 0 to 5)") from None
        elif raw in t.labels:
            label = t.labels.index(raw)
        else:
            raise GlueError(f"{path}:{lineno}: bad label {raw[:40]!r} (need one of "
                            f"{', '.join(t.labels)})")
        out.append(Example(f[t.a], f[t.b] if t.b is not None else None, label))
    return out


def read_task(glue_dir, name):
    """(train examples, {dev split name: examples}) of a task; dev names drop '.tsv'."""
    t = TASKS[name]
    folder = Path(glue_dir) / t.folder
    if not folder.is_dir():
        raise GlueError(f"{folder}: no such folder: task {name} needs {t.folder}/ with "
                        f"{', '.join(t.columns)}")
    return read_split(glue_dir, name, "train.tsv"), \
        {f[:-4]: read_split(glue_dir, name, f) for f in t.dev_files}


def both_orders(examples):
    """Details: MRPC and STS-B are symmetric: the official code also trains on every pair
    swapped (its `double_unordered` option, configure_finetuning.py)."""
    return examples + [Example(e.b, e.a, e.label) for e in examples]


# ----------------------------------------------------------------------------- inputs

def truncate_pair(a, b, max_tokens):
    """BERT's longest-first truncation: drop the last token of the longer part until the pair
    fits (a tie drops from b)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


def build_input(ids_a, ids_b, cls_id, sep_id, max_len=128):
    """[CLS] a [SEP] b [SEP] (ids_b None: [CLS] a [SEP]) -> (token ids, segment ids), at most
    max_len tokens. Segment 0 covers [CLS] a [SEP], segment 1 covers b [SEP], as in BERT."""
    n_special = 2 if ids_b is None else 3
    ids_a, ids_b = truncate_pair(ids_a, ids_b or [], max_len - n_special)
    ids = [cls_id] + ids_a + [sep_id]
    seg = [0] * len(ids)
    if n_special == 3:
        ids += ids_b + [sep_id]
        seg += [1] * (len(ids_b) + 1)
    return ids, seg


def encode_example(tokenizer, a, b=None, max_len=128):
    """One example as model input (see build_input)."""
    return build_input(tokenizer.encode(a), None if b is None else tokenizer.encode(b),
                       tokenizer.cls_id, tokenizer.sep_id, max_len)


def encode_examples(tokenizer, examples, max_len=128):
    """Many examples at once: a list of (token ids, segment ids) and a float array of labels.

    Engineering: tiktoken encodes MNLI's about 785k texts in parallel."""
    a = tokenizer.encode_batch([e.a for e in examples])
    pairs = examples[0].b is not None
    b = tokenizer.encode_batch([e.b for e in examples]) if pairs else [None] * len(examples)
    inputs = [build_input(x, y, tokenizer.cls_id, tokenizer.sep_id, max_len) for x, y in zip(a, b)]
    return inputs, np.array([e.label for e in examples], dtype=np.float32)


# ----------------------------------------------------------------------------- metrics

def accuracy(pred, gold):
    return float(np.mean(np.asarray(pred) == np.asarray(gold)))


def f1_score(pred, gold):
    """F1 of the positive class (1), $2 TP / (2 TP + FP + FN)$; 0 when there is nothing to
    find and nothing predicted."""
    p, g = np.asarray(pred) == 1, np.asarray(gold) == 1
    tp, fp, fn = np.sum(p & g), np.sum(p & ~g), np.sum(~p & g)
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0


def matthews_corr(pred, gold):
    """Matthews correlation,
    $$ MCC = (TP ⋅ TN − FP ⋅ FN) /
       "    " √{(TP + FP)(TP + FN)(TN + FP)(TN + FN)} $$
    0 for a classifier that predicts one class everywhere (a zero factor below; scikit-learn's
    choice too): what an untrained CoLA model gets."""
    p, g = np.asarray(pred) == 1, np.asarray(gold) == 1
    tp, tn = float(np.sum(p & g)), float(np.sum(~p & ~g))
    fp, fn = float(np.sum(p & ~g)), float(np.sum(~p & g))
    den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return float((tp * tn - fp * fn) / np.sqrt(den)) if den > 0 else 0.0


def pearson_corr(x, y):
    """Pearson r; 0 when either side is constant (r is undefined there, and NaN is not JSON)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    den = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / den) if den > 0 else 0.0


def rank_average(x):
    """Engineering: ranks 1..n, tied values sharing the average of their ranks
    ([10, 20, 20] -> [1, 2.5, 2.5])."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman_corr(x, y):
    """Spearman's rho: the Pearson correlation of the (tie-averaged) ranks."""
    return pearson_corr(rank_average(x), rank_average(y))


def task_metrics(name, pred, gold):
    """All metrics of one dev split: predictions are class ids (or scores for STS-B)."""
    if name == "cola":
        return {"mcc": matthews_corr(pred, gold), "acc": accuracy(pred, gold)}
    if name == "stsb":
        return {"spearman": spearman_corr(pred, gold), "pearson": pearson_corr(pred, gold)}
    if name in ("mrpc", "qqp"):
        return {"acc": accuracy(pred, gold), "f1": f1_score(pred, gold)}
    return {"acc": accuracy(pred, gold)}


# ----------------------------------------------------------------------------- results

def summarize(runs, metric):
    """One task's entry of the results: the median over seeds, the paper's number (over 10).

    Details: with every seed's run and [min, max]."""
    keys = runs[0]["metrics"]
    return {"metric": metric, "seeds": runs,
            "median": {k: float(np.median([r["metrics"][k] for r in runs])) for k in keys},
            "spread": {k: [min(r["metrics"][k] for r in runs), max(r["metrics"][k] for r in runs)]
                       for k in keys}}


def print_table(results):
    """Engineering: task | each metric as median ×100 [min, max] over the seeds."""
    print(f"\n{'task':6} | {'n':>2} | metrics (median ×100 [min, max] over seeds)")
    for name, r in results.items():
        cells = [f"{k} {100 * v:.1f} [{100 * r['spread'][k][0]:.1f}, "
                 f"{100 * r['spread'][k][1]:.1f}]" for k, v in r["median"].items()]
        print(f"{name:6} | {len(r['seeds']):>2} | " + " | ".join(cells))


# ----------------------------------------------------------------------------- download

# Engineering: the classic GLUE download script's sources (nyu-mll/GLUE-baselines); MRPC is
# built from Microsoft's files and GLUE's dev ids.
BASE = "https://dl.fbaipublicfiles.com/glue/data/"
GLUE_URLS = {"cola": BASE + "CoLA.zip", "sst2": BASE + "SST-2.zip", "qqp": BASE + "QQP-clean.zip",
             "stsb": BASE + "STS-B.zip", "mnli": BASE + "MNLI.zip", "qnli": BASE + "QNLIv2.zip",
             "rte": BASE + "RTE.zip"}
MRPC_URLS = {"train": "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
             "dev_ids": "https://firebasestorage.googleapis.com/v0/b/mtl-sentence-representations."
                        "appspot.com/o/data%2Fmrpc_dev_ids.tsv?alt=media&token=ec5c0836-31d5-48f4"
                        "-b431-7480817f1adc"}


def _fetch(url, dest, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r, open(dest, "wb") as f:
            shutil.copyfileobj(r, f)
    except (urllib.error.URLError, socket.timeout, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise GlueError(f"cannot download {url}: {reason} (offline? download GLUE elsewhere and "
                        "pass --glue_dir)") from None


def download_glue(dest, names, timeout=10.0, log=print):
    """Engineering: fetch the tasks `names` into dest/ in the standard layout. Offline, the
    first request fails within `timeout` seconds with a GlueError; nothing half-written is
    left behind (each task is unpacked into a temporary folder and moved into place)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        t = TASKS[name]
        if (dest / t.folder).is_dir():
            log(f"{name}: {dest / t.folder} exists, not downloading")
            continue
        log(f"downloading {t.folder} ...")
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            tmp = Path(tmp)
            if name == "mrpc":
                _fetch(MRPC_URLS["train"], tmp / "msr_train.txt", timeout)
                _fetch(MRPC_URLS["dev_ids"], tmp / "dev_ids.tsv", timeout)
                _format_mrpc(tmp)
            else:
                _fetch(GLUE_URLS[name], tmp / "task.zip", timeout)
                try:
                    with zipfile.ZipFile(tmp / "task.zip") as z:
                        z.extractall(tmp)
                except zipfile.BadZipFile:
                    raise GlueError(f"{GLUE_URLS[name]}: not a zip file") from None
            if not (tmp / t.folder).is_dir():
                raise GlueError(f"{name}: the download holds no {t.folder}/ folder")
            os.replace(tmp / t.folder, dest / t.folder)


def _format_mrpc(tmp):
    """Engineering: as the classic script, the rows of msr_paraphrase_train.txt whose ids are
    in GLUE's dev list form dev.tsv, the others train.tsv."""
    dev_ids = {tuple(l.strip().split("\t")) for l in
               (tmp / "dev_ids.tsv").read_text(encoding="utf-8-sig").splitlines() if l.strip()}
    lines = (tmp / "msr_train.txt").read_text(encoding="utf-8-sig").splitlines()
    out = tmp / "MRPC"
    out.mkdir()
    train, dev = [lines[0]], [lines[0]]
    for line in lines[1:]:
        f = line.strip().split("\t")
        if len(f) == 5:
            (dev if (f[1], f[2]) in dev_ids else train).append("\t".join(f))
    (out / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (out / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")

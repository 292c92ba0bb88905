"""Shared test fixtures: a small prepared corpus and a way to run the command lines.

Real text comes from ../shared/data/corpus when it is there (as on the developers' machines and
CI); elsewhere a generated corpus with learnable structure stands in, so the suite still runs.

A fixture shared by several tests (scope "module" or "session") is read, never changed: a test
that changes what it is given (monkeypatches a model, writes into a folder) takes a
function-scoped fixture or a copy, or the next test sees its changes, and in what order tests run
is the runner's business. The shared folders below check this when the session ends."""
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "data" / "corpus"
sys.path.insert(0, str(ROOT))

# One PyTorch thread for the tests and every command they start (OMP_NUM_THREADS is inherited).
# The models here are small, so a second thread gains little on an idle machine; on a busy one
# two threads wait on each other at every operation: a tiny training run measured ten times
# slower with 2 threads than with 1 beside other jobs (docs/results.md, "Tests and CI").
# ELECTRA_TEST_THREADS=2 gives the tests two.
os.environ["OMP_NUM_THREADS"] = os.environ.get("ELECTRA_TEST_THREADS", "1")


def real_text(n_chars, shard="wiki2015-00.txt.xz"):
    """The first n_chars of a ../shared corpus shard, or None when it is absent."""
    path = CORPUS / shard
    if not path.exists():
        return None
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return f.read(n_chars)


def generated_text(n_sentences, seed=0):
    """Template sentences: a masked LM can learn them, so losses visibly fall."""
    rng = random.Random(seed)
    subj = ["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird"]
    verb = ["sees", "likes", "finds", "follows", "helps", "watches"]
    obj = ["the ball", "a red house", "the river", "her friend", "the green tree", "a book"]
    lines = [f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)} in the morning."
             for _ in range(n_sentences)]
    return "\n\n".join(" ".join(lines[i:i + 5]) for i in range(0, len(lines), 5))


def snapshot(path):
    """{file: (size, modification time)} under path (or of the file path itself)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.rglob("*"))
    return {str(f): (f.stat().st_size, f.stat().st_mtime_ns) for f in files}


def read_only(path):
    """Yield path for the session's tests, then fail if one of them changed it."""
    before = snapshot(path)
    yield path
    assert snapshot(path) == before, f"a test changed the shared {path}: give it its own copy"


# A guard against a hung test, never a speed requirement: a test asserts on steps and values,
# and a busy or slow machine may take many times longer than an idle one without failing it.
HANG = 1800


def run_cli(*args, timeout=HANG, env=None):
    """Run `python <args>` in the project root; returns CompletedProcess (text)."""
    env = dict(env or os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def save_tiny(path, tok, model="electra"):
    """An untrained tiny checkpoint (seed 0) of `model` with tokenizer tok, saved at path."""
    from ablations import build_model
    from machinery.checkpoint import save_checkpoint
    from config import SIZES, Config
    import torch
    cfg = Config(**SIZES["tiny"], vocab_size=tok.vocab_size, model=model)
    torch.manual_seed(0)
    net = build_model(cfg)
    save_checkpoint(path, dict(config=cfg.to_dict(), model=net.state_dict(), step=0,
                               tokenizer=tok.to_text()))
    return path


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    """~400 KB of text on disk: real Wikipedia text when ../shared is present."""
    text = real_text(400_000) or generated_text(8000)
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    yield from read_only(path)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory, corpus_file):
    """A prepared data folder (tokenizer of 1000 tokens + memmaps), made by data.prepare."""
    import data
    out = tmp_path_factory.mktemp("data") / "small"
    docs = data.read_documents(corpus_file)
    data.prepare(docs, out, vocab_size=1000, bpe_mb=1, log=lambda *a, **k: None)
    yield from read_only(out)


@pytest.fixture(scope="session")
def learnable_data_dir(tmp_path_factory):
    """Generated template text: a tiny model learns it within a few hundred CPU steps."""
    import data
    out = tmp_path_factory.mktemp("data") / "learnable"
    docs = generated_text(6000).split("\n\n")
    data.prepare(docs, out, vocab_size=300, bpe_mb=1, log=lambda *a, **k: None)
    yield from read_only(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The Annotated ELECTRA built into a temporary folder once per test module: (folder, the
    pages' file names). Skips without the optional Markdown renderer."""
    try:
        import markdown  # noqa: F401
    except ImportError:
        pytest.skip("the optional Markdown renderer is not installed (pip install markdown)")
    from teaching import annotate
    out = tmp_path_factory.mktemp("annotated") / "site"
    return out, annotate.build(out)


@pytest.fixture(scope="module")
def one_thread():
    """One PyTorch thread for a module's tests (small models gain nothing from more, and other
    jobs share the cores), restored afterwards for the other test files."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def stand_in_attention(monkeypatch):
    """For the assignment tests (tests/parts/, teaching/make_assignment.py): part 7, self-attention,
    replaced by a stand-in in which every position attends only to itself, so that a part which
    runs a network (the joint loss, ELECTRA 15%) is graded while attention is still blank."""
    import encoder
    from teaching.stand_ins import attend_to_self      # (the grader's worker uses it too)
    monkeypatch.setattr(encoder.SelfAttention, "forward", attend_to_self)


def one_token_discriminator(token_id, logit):
    """A stand-in D, sure (by `logit`) that `token_id` is replaced and every other token real:
    for tests of what is drawn or decided from D's scores."""
    import torch

    class OneTokenD(torch.nn.Module):
        def forward(self, x, pad_mask=None, segment_ids=None):
            return torch.where(x == token_id, logit, -logit)
    return OneTokenD()

def pytest_configure(config):
    # Inductor imports torch/utils/mkldnn.py, whose classes PyTorch itself still decorates with
    # @torch.jit.script_method, deprecated since PyTorch 2.10: every test that compiles with
    # Inductor printed that warning (14 times), though nothing in this project calls it.
    # Silenced by its exact text, so any other deprecation still shows.
    config.addinivalue_line(
        "filterwarnings",
        r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning")
    config.addinivalue_line(
        "markers", "extras: takes another branch where the optional extras (transformers, "
        "safetensors, datasets, jupytext) are installed; CI runs it again once they are")


# CI's second pass (.ci/run), after installing the optional extras, runs only what they change:
# the tests the first pass skipped for want of one (their node ids, which the first pass writes
# to the file ELECTRA_EXTRA_SKIPS names) and the tests marked `extras`. ELECTRA_EXTRAS_PASS names
# that file in the second pass.
EXTRAS = ("transformers", "safetensors", "datasets", "tokenizers", "jupytext")


def pytest_runtest_logreport(report):
    log = os.environ.get("ELECTRA_EXTRA_SKIPS")
    if log and report.skipped and isinstance(report.longrepr, tuple) and \
            any(f"'{name}" in str(report.longrepr[2]) for name in EXTRAS):
        with open(log, "a") as f:
            f.write(report.nodeid + "\n")


pytest_collectreport = pytest_runtest_logreport     # (a whole file skipped: its path)


def pytest_collection_modifyitems(config, items):
    skipped = os.environ.get("ELECTRA_EXTRAS_PASS")
    if skipped is None:
        return
    again = set(Path(skipped).read_text().split()) if Path(skipped).is_file() else set()
    keep = [i for i in items if i.nodeid in again or i.nodeid.split("::")[0] in again
            or i.get_closest_marker("extras")]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep

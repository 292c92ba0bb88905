"""Machinery (skip on a first read): what each command-line flag accepts, shared by every script.

Each flag names its kind of value with a `type=` from this file, so a bad value is refused while
the arguments are parsed - before a model is built, data is read or a folder is created - in one
line that names the flag, what it takes and what it got:

    error: argument --log_every: must be a positive integer, got '0' (see --help)

`Parser` is argparse's parser with that one line as its error (argparse prints its usage block
first) and argparse's exit status, 2. Numbers must be finite: NaN passes every comparison test
as False, so a `--lr nan` would otherwise slip past `lr > 0` checks written the other way round.
"""
import argparse
import contextlib
import math
import sys
from pathlib import Path

# More threads than this cannot help any machine, and a few thousand can crash the process
# (a segmentation fault inside PyTorch's thread pool), so refuse them here.
MAX_THREADS = 1024
MAX_SEED = 2 ** 32 - 1          # the range every seeded generator here accepts (numpy's too)
# The paper's largest batch is ELECTRA-Large's 2048; 32x that no single run here can hold, and
# a typo such as 1e9 would otherwise end in an allocation failure deep inside PyTorch.
MAX_BATCH = 65536


def blank_part(e):
    """The one error line for a student copy's part that is still blank, else None.

    teaching/make_assignment.py writes each chosen part's body as `raise NotImplementedError(
    "Part N (name, paper §x): hint. See ASSIGNMENTS.md")`; a command that reaches it says so in
    one line instead of a traceback through the training loop. Any other NotImplementedError is
    a bug and keeps its traceback (blank_part_or_raise raises it again)."""
    text = str(e)
    if isinstance(e, NotImplementedError) and text.startswith("Part ") and "ASSIGNMENTS.md" in text:
        return f"error: this copy's assignment is not done yet: {text}"
    return None


def blank_part_or_raise(e):
    """In `except NotImplementedError as e:`, blank_part's line for a student copy's blank part;
    any other NotImplementedError is raised again, with its traceback."""
    line = blank_part(e)
    if line is None:
        raise e
    return line


class Parser(argparse.ArgumentParser):
    def error(self, message):           # one line, not the usage block + a line
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _refuse(accepts, text):
    raise argparse.ArgumentTypeError(f"must be {accepts}, got {text!r}")


def _to_int(text, accepts):
    """An integer; "1e6" is accepted too (a float with a whole value), "2.5" and "nan" are not."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        _refuse(accepts, text)
    if not (math.isfinite(x) and x == int(x)):
        _refuse(accepts, text)
    return int(x)


def int_range(lo, hi=None, accepts=None):
    """A `type=` for integers in [lo, hi] (no upper end when hi is None)."""
    accepts = accepts or (f"an integer from {lo} to {hi}" if hi is not None else
                          "a positive integer" if lo == 1 else
                          "an integer >= 0" if lo == 0 else f"an integer >= {lo}")

    def check(text):
        x = _to_int(text, accepts)
        if x < lo or (hi is not None and x > hi):
            _refuse(accepts, text)
        return x
    check.__name__ = "integer"
    return check


def float_range(lo=None, hi=None, lo_open=True, hi_open=True, accepts=None):
    """A `type=` for finite numbers between lo and hi (each end open or closed, or absent)."""
    def check(text):
        try:
            x = float(text)
        except ValueError:
            _refuse(accepts, text)
        if not math.isfinite(x) or \
                (lo is not None and (x <= lo if lo_open else x < lo)) or \
                (hi is not None and (x >= hi if hi_open else x > hi)):
            _refuse(accepts, text)
        return x
    check.__name__ = "number"
    return check


positive_int = int_range(1)
non_negative_int = int_range(0)
threads = int_range(1, MAX_THREADS)
batch_size = int_range(1, MAX_BATCH)
seed = int_range(0, MAX_SEED)
positive_float = float_range(0, accepts="a positive number")
non_negative_float = float_range(0, lo_open=False, accepts="a number >= 0")
share = float_range(0, 1, accepts="a share strictly between 0 and 1, e.g. 0.15")


def nonempty(text):
    """A path or a name that is not empty: an empty path would quietly mean the current folder,
    and `if not args.x` would quietly take the default."""
    if not text.strip():
        _refuse("a non-empty path or name", text)
    return text


def out_file(text):
    """A file to write later: refused now if it names a folder or its folder does not exist,
    rather than after the work that produces it."""
    nonempty(text)
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name in it")
    if not p.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{p.parent}: no such folder to write {p.name} in")
    return text


def out_folder(text):
    """A folder to write into (created if needed): refused if it is an existing file."""
    nonempty(text)
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: pick another folder")
    return text


def remove_if_left_empty(folder, existed):
    """After a refused run: remove `folder` if the run made it (it did not exist before) and left
    it empty, so that a one-line error leaves nothing behind. A folder with anything in it stays."""
    if not existed:
        with contextlib.suppress(OSError):
            Path(folder).rmdir()

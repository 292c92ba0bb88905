"""Hugging Face datasets as a pre-training corpus (`python data.py --hf DATASET`).

ELECTRA-Small was released trained on OpenWebText, the paper's models on Wikipedia and
BooksCorpus: text this project cannot ship. This file streams such a dataset, with the optional
`datasets` package (an extra, like `transformers`), into the same documents that data.py reads
from text files; data.py then prepares them as any corpus. Nothing here runs unless --hf is
given, and every problem that can be seen before reading - no `datasets`, no network, a column
or split that is not there - is one DatasetError line before anything is written.
"""
import os
from pathlib import Path


class DatasetError(Exception):
    """Bad --hf input the user can fix; data.py's command line prints it as one line."""


HF_FILE_KINDS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".jsonl.gz": "json",
                 ".json.gz": "json"}
HF_INSTALL = ("--hf needs the optional `datasets` package: pip install datasets "
              "(or give text files to --corpus)")


def hf_documents(name, config=None, split="train", text_field="text"):
    """The documents of a Hugging Face dataset, streamed, with the optional `datasets` package:
    a dataset on the hub (`openwebtext`, `wikimedia/wikipedia` with config `20231101.en`), a
    folder written by save_to_disk, or Parquet / JSON-lines files (a file or a folder of them).
    Each row's `text_field` is one document, as each line of a .jsonl given to --corpus is.
    Returns (documents, fraction, source) as corpus_documents does; every problem that can be
    seen before reading is a DatasetError here, before anything is written."""
    import importlib.util
    if importlib.util.find_spec("datasets") is None:
        raise DatasetError(HF_INSTALL)     # before asking the network anything
    path = Path(name)
    offline = bool(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("HF_DATASETS_OFFLINE"))
    unreachable = False
    if not path.exists() and not offline and not _hub_reachable():
        # Without a network, datasets retries for half a minute and prints every try. Its
        # offline mode looks in the local cache alone, and fails at once when it is not there.
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        unreachable = True
    try:
        import datasets
    except ImportError:
        raise DatasetError(HF_INSTALL) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    total = None
    try:
        if path.exists():
            ds, total = _open_local_dataset(datasets, path, split)
        else:
            ds = datasets.load_dataset(name, config, split=split, streaming=True)
            try:
                total = ds.info.splits[split].num_examples
            except (AttributeError, KeyError, TypeError):
                pass
    except DatasetError:
        raise
    except Exception as e:              # whatever the hub, the cache or the files answer
        raise DatasetError(_hf_failure(name, e, unreachable)) from None
    if ds.column_names is not None:     # a streamed dataset may know its columns only later
        if text_field not in ds.column_names:
            raise DatasetError(f"{name} has no column {text_field!r} (it has "
                            f"{', '.join(ds.column_names)}): choose one with --text_field")
        ds = ds.select_columns([text_field])
    state = {"rows": 0}
    try:                                # batches as Arrow tables: 3x faster than Python dicts
        ds, arrow = ds.with_format("arrow"), True
    except Exception:
        arrow = False

    def documents():
        try:
            for batch in ds.iter(batch_size=1000):
                columns = batch.column_names if arrow else list(batch)
                if text_field not in columns:
                    raise DatasetError(f"{name} has no column {text_field!r} (it has "
                                    f"{', '.join(columns)}): choose one with --text_field")
                texts = batch[text_field]
                for text in texts.to_pylist() if arrow else texts:
                    state["rows"] += 1
                    if text is not None and not isinstance(text, str):
                        raise DatasetError(f"{name}: column {text_field!r} holds "
                                        f"{type(text).__name__}, not text: choose another "
                                        "with --text_field")
                    if text and text.strip():
                        yield text
        except (DatasetError, KeyboardInterrupt, GeneratorExit):
            raise
        except Exception as e:          # the network went away, a damaged file ...
            raise DatasetError(f"reading {name} failed after {state['rows']:,} rows "
                            f"({type(e).__name__}: {_first_line(e)}): nothing was written; "
                            "run the command again") from None

    fraction = (lambda: state["rows"] / total) if total else None
    source = f"{name} ({config}, {split})" if config else f"{name} ({split})"
    return documents(), fraction, source


def _open_local_dataset(datasets, path, split):
    """A save_to_disk folder (Dataset or DatasetDict), or Parquet / JSON-lines files; returns
    (dataset, rows or None)."""
    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DatasetError(f"{path} has no split {split!r} (it has {', '.join(ds)}): "
                                "choose one with --hf_split")
            ds = ds[split]
        return ds, len(ds)              # memory-mapped Arrow: read as it is iterated
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    kinds = {f: next((k for s, k in HF_FILE_KINDS.items() if f.name.endswith(s)), None)
             for f in files}
    files = [f for f in files if kinds[f]]
    if not files or len({kinds[f] for f in files}) > 1:
        raise DatasetError(f"{path}: give a save_to_disk folder, or .parquet or .jsonl files "
                        "(one kind), to --hf")
    kind = kinds[files[0]]
    rows = None
    if kind == "parquet":               # the row count is in each file's footer
        import pyarrow.parquet as pq
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    ds = datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train",
                               streaming=True)
    return ds, rows


def _hub_reachable(timeout=10):
    """Whether the Hugging Face hub answers at all (any HTTP answer counts), within `timeout`
    seconds."""
    import urllib.error
    import urllib.request
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _hf_failure(name, e, unreachable):
    """One line for a dataset that could not be opened: what happened, and what to do."""
    text = _first_line(e)
    if "scripts are no longer supported" in text:
        return (f"{name} is published as a loading script, which this version of datasets no "
                "longer runs: choose a dataset stored as Parquet (e.g. wikimedia/wikipedia "
                "--hf_config 20231101.en), or pip install 'datasets<4'")
    if unreachable or "offline" in text.lower() or "couldn't reach" in text.lower():
        return (f"cannot reach the Hugging Face hub, and {name} is not in the local cache: "
                "connect to the internet, or copy the dataset here (Parquet files or a "
                "save_to_disk folder) and give its path to --hf")
    if type(e).__name__ in ("DatasetNotFoundError", "FileNotFoundError", "RepositoryNotFoundError"):
        return f"{name}: no such dataset on the hub or on disk ({text}): check the name"
    return f"could not open {name} ({type(e).__name__}: {text})"


def _first_line(e):
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:300]


"""Time making one batch of 128 x 128 (batches.PretrainingData.assemble) against the row-by-row
loop it replaced (tests/test_data.py keeps it as the reference): python benchmarks/batch_time.py DATA_DIR
(machinery-level measurement; no paper section)."""
import statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests"))
import numpy as np
import batches
from test_data import rows_one_by_one
d = batches.PretrainingData(sys.argv[1], "train", 128, 128, seed=0)
rng = np.random.default_rng(0)
res = {"before (row loop)": [], "after (assemble)": [], "next_batch whole": []}
for rep in range(30):
    rows = d.examples[rng.permutation(d.n_seqs)[:128]]
    for name, f in (("before (row loop)", lambda: rows_one_by_one(d, rows)),
                    ("after (assemble)", lambda: d.assemble(rows)), ("next_batch whole", d.next_batch)):
        t = time.perf_counter()
        for _ in range(20): f()
        res[name].append((time.perf_counter() - t) / 20 * 1000)
for k, v in res.items():
    print(f"{k}: median {statistics.median(v):.3f} ms, min {min(v):.3f} ms a batch of 128 x 128")

"""torchrun with 2 CPU processes (gloo): the same script, DistributedDataParallel."""

import socket

import torch

import batches
from machinery.checkpoint import load_checkpoint
from conftest import HANG, run_cli


def test_ranks_read_disjoint_halves_of_the_global_batch(data_dir):
    whole = batches.PretrainingData(data_dir, "train", 8, 32, seed=3)
    halves = [batches.PretrainingData(data_dir, "train", 8, 32, seed=3, rank=r, world=2)
              for r in range(2)]
    for _ in range(3):
        w, hs = whole.next_batch(), [h.next_batch() for h in halves]
        for key in ("x", "segment_ids", "pad_mask"):
            assert torch.equal(w[key], torch.cat([h[key] for h in hs])), key
    # masks differ between ranks (each rank has its own mask RNG)
    assert halves[0].mask_generator().initial_seed() != halves[1].mask_generator().initial_seed()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why(r):
    """The children's own complaints first (torchrun's summary buries them under its own)."""
    own = [l for l in r.stderr.splitlines()
           if any(w in l for w in ("terminate", "what()", "Error", "error:", "Traceback"))]
    return "\n".join(own[:20]) + "\n...\n" + r.stderr[-1500:]


def test_torchrun_two_processes_trains_and_checkpoints(data_dir, tmp_path):
    out = tmp_path / "ddp"
    r = run_cli("-m", "torch.distributed.run", "--nproc_per_node=2",
                f"--master_port={free_port()}",
                "electra_small.py", "--data", data_dir, "--out_dir", out, "--size", "tiny",
                "--max_steps", "12", "--log_every", "4", "--threads", "1", timeout=HANG)
    assert r.returncode == 0, why(r)
    assert r.stdout.count("step 12 |") == 1            # only rank 0 prints
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == 12 and ckpt["world"] == 2
    assert not any(k.startswith("module.") for k in ckpt["model"])   # the unwrapped model
    # it resumes in a single process from the same checkpoint
    r = run_cli("electra_small.py", "--data", data_dir, "--out_dir", out, "--resume",
                "--max_steps", "14", "--log_every", "1", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "step 14 |" in r.stdout

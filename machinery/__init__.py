"""Machinery: what the core files lean on, skipped on a first read.

    tokenizer.py        byte-level BPE (tiktoken) trained on your corpus, BERT's special tokens
    tokenize_corpus.py  text -> sentences -> token ids, a worker process per core (for data.py)
    hf_data.py          reading a Hugging Face dataset for data.py --hf (optional `datasets`)
    mlm_output.py       G's output layer, L_MLM and the sample x̂ in one pass over p_G (fast path)
    step.py             the whole training step as one compiled graph (--compile)
    stepper.py          how train.py's step runs: eager or compiled, DDP, profiler, threads
    run_state.py        a run's counters, budget and clock, resume, and its checkpoints
    run_log.py          log.jsonl, MFU and the statistics summed on the device
    divergence.py       a NaN or infinite loss: seen on the device, stopped in one line
    profile.py          --profile: a torch.profiler trace of a few steps
    progress.py         the progress line, and whether D has left the plateau
    checkpoint.py       save and load checkpoints, never half-written (atomic.py)
    device.py           CPU / CUDA / MPS, bf16 where the hardware has it
    distributed.py      torchrun data parallelism
    cli.py              what each command-line flag accepts, bad input as one line
    static_shapes.py    GLUE fine-tuning at fixed shapes, a compiled graph per length
    glue_cli.py         finetune_glue.py's command line: flags, checks, the results file

Nothing here imports the core (tests/test_layout.py checks it)."""

"""Benchmarks: what a training step costs, and whether ours learns like Hugging Face's Electra.

    bench.py            steps/s, tokens/s, MFU and memory of ours, BERT-Small and HF's Electra,
                        timing train.py's own step on its own batches; a roofline estimate
    step_cost.py        counted operations, saved activations, graph counts, bytes and FLOPs
    batch_time.py       the time to make one batch (the GPU's prefetching thread)
    selfcheck.py        the compiled step against eager at the Table 6 shape (CUDA graphs)
    parity.py           ours and HF's Electra trained on the same batches, loss by loss
    finetune_speed.py   GLUE fine-tuning's examples/s, eager against static shapes
    hf_electra.py       Hugging Face's Electra wired as ours (optional `transformers`)
    gpu_measure.sh      the GPU measurements: `all MIN` in one command, or stage by stage

    python benchmarks/bench.py --size small --device cuda --compile
    bash benchmarks/gpu_measure.sh all 9"""

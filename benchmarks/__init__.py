"""Benchmarks: what a training step costs, and whether ours learns like Hugging Face's Electra.

    bench.py            steps/s, tokens/s, MFU and memory of ours, BERT-Small and HF's Electra
    step_cost.py        counted operations, saved activations, graph counts of one step
    parity.py           ours and HF's Electra trained on the same batches, loss by loss
    hf_electra.py       Hugging Face's Electra wired as ours (optional `transformers`)
    gpu_measure.sh      the GPU measurements in stages of under 10 minutes (docs/gpu.md)

    python benchmarks/bench.py --size small --device cuda --compile"""

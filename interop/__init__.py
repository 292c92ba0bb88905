"""Interop: ELECTRA checkpoints to and from Hugging Face `transformers` (docs/interop.md).

    export_hf.py        our D and G as ElectraForPreTraining / ElectraForMaskedLM folders
    hf_import.py        a Hugging Face ELECTRA folder as a checkpoint for finetune_glue.py
    wordpiece.py        BERT's WordPiece tokenizer, for the published checkpoints' vocab.txt

    python interop/export_hf.py --ckpt out/ckpt.pt --out out/hf"""

"""Analysis: looking inside a trained discriminator (Figure 2, and the reviewers' questions).

    inspect_discriminator.pythe command: P(replaced) per token, Figure 2 on your text,
                               calibration, zero-shot CoLA / SST-2, attention by offset,
                               D as a masked language model (Appendix G)
    analyses.py         the measurements behind it

    python analysis/inspect_discriminator.py all --ckpt out/ckpt.pt --data data/NAME"""

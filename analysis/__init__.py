"""Analysis: looking inside a trained discriminator (Figure 2, and a blog review's questions).

    inspect_discriminator.py   the command: P(replaced) per token, Figure 2 on your text,
                               calibration, zero-shot CoLA / SST-2, attention by offset,
                               D as a masked language model (Appendix G), `compare` (D against
                               BERT) and `tokens` (which tokens D distrusts)
    figure2.py                 Figure 2 with real tensors: one step of G and D on your text
    analyses.py                the measurements behind the first commands
    appendix_g.py              D and G as a masked language model (Appendix G): `mlm`
    representations.py         linear CKA and linear probes, layer by layer (`compare`)
    token_groups.py            tokens grouped by what the tokenizer and the text tell (`tokens`)
    serve.py                   the sentence view and one step in the browser: a local page
    serve_view.py              that page's model side: the checkpoint and a request's fields
    serve_page.py              that page's HTML: the form, the coloured tokens, the step's rows

    python analysis/inspect_discriminator.py all --ckpt out/ckpt.pt --data data/NAME
    python analysis/serve.py --ckpt out/ckpt.pt        # then open http://127.0.0.1:8000/"""

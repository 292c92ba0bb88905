"""Teaching: the Annotated ELECTRA and course assignments, both made from the reference code.

    make_assignment.py  a student copy with chosen functions blank, graded part by part
    annotate.py         the Annotated ELECTRA: the reading path as web pages, notes beside code
    one_step.py         one real step on one sentence as a table (a picture for those pages)

    python teaching/make_assignment.py --out ../hw1 --parts mask,sample,corrupt
    python teaching/annotate.py                      # -> out_annotated/index.html"""

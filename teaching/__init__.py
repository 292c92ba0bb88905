"""Teaching: the Annotated ELECTRA and course assignments, both made from the reference code.

    course.py           the course: the parts, their contracts, points and the grader's limits
    make_assignment.py  a student copy with chosen functions blank, graded part by part
    grade.py            the grader: a copy's score table, Gradescope's results.json
    runner.py           the tests' process the grader runs (time limits, output caps)
    plugin.py           the pytest plugin in that process: reports each test back to the grader
    remote.py           the stubs through which the tests call the submitted code's worker
    worker.py           the worker: the one process the submitted code runs in (an ordinary user)
    stand_ins.py        the stand-ins of other parts, by name, for the tests and the worker alike
    similar.py          how alike a submitted body is to the reference (for instructors only)
    strays.py           the processes a submission's code leaves running, found and stopped
    autograder.py       Gradescope's autograder.zip for a copy, and a fake /autograder to check it
    hidden_tests.py     the hidden tests, shipped only in the autograder.zip
    annotate.py         the Annotated ELECTRA: the reading path as web pages, notes beside code
    mathml.py           the notes' math notation, typeset as MathML for those pages
    links.py            the notes' links: to definitions, pages, the paper and the official code
    one_step.py         one real step on one sentence as a table (a picture for those pages)

    python teaching/make_assignment.py --out ../hw1 --parts mask,sample,corrupt \
        --autograder ../hw1-autograder.zip
    python teaching/grade.py --check ../hw1-autograder.zip    # the reference: full marks
    python teaching/annotate.py                      # -> out_annotated/index.html"""

"""Teaching: course assignments made from the reference code (ASSIGNMENTS.md).

    make_assignment.py  a student copy with chosen functions blank, graded part by part

    python teaching/make_assignment.py --out ../hw1 --parts mask,sample,corrupt"""

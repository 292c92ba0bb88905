"""Grading tests, one file per assignment part (make_assignment.py, ASSIGNMENTS.md).

Each file grades one part alone: it calls only that part's function, and where the function
calls other parts (the joint loss calls L_MLM, L_Disc, sampling and corruption) the test puts
simple stand-ins in their place, so a part can be graded while the others are still blank."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

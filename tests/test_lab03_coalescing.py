"""Lab 03 through real nbgrader: the solution scores full marks, the untouched lab 0, and
known-wrong versions lose exactly the points of the part they get wrong — in particular a
kernel whose results are right but whose accesses are not coalesced loses the coalescing points, and a
profile read by the store metrics' names (or the folklore's prediction) loses exercise 4's."""

import pytest
from labtools import (
    SILENCE_THE_GRADER,
    cell_output,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab03_coalescing"

pytestmark = pytest.mark.slow

# Right shape and right results, but a transposed *view*: each row's floats are still 32 bytes apart
# in memory, so every access fetches 32 sectors.
SOA_AS_TRANSPOSED_VIEW = '''
def to_soa(particles):
    return particles.T


@cuda.jit
def drift_soa(soa, dt):
    i = cuda.grid(1)
    if i < soa.shape[1]:
        soa[0, i] += soa[3, i] * dt
        soa[1, i] += soa[4, i] * dt
        soa[2, i] += soa[5, i] * dt
'''

# Right results, launch adapted to it, but warps still walk down columns.
STILL_COLUMN_WISE = '''
@cuda.jit
def scale_rows(a, w, out):
    row, col = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col] * w[row]


def launch_config(shape, block=(32, 8)):
    rows, cols = shape
    return ((rows + block[0] - 1) // block[0], (cols + block[1] - 1) // block[1]), block
'''

# Coalesced kernel, but the grid was not swapped with it: some rows are never written.
GRID_NOT_SWAPPED = '''
@cuda.jit
def scale_rows(a, w, out):
    col, row = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col] * w[row]


def launch_config(shape, block=(32, 8)):
    rows, cols = shape
    return ((rows + block[0] - 1) // block[0], (cols + block[1] - 1) // block[1]), block
'''

# Counts bytes, not sectors: right only when the request is aligned and dense.
BYTES_OVER_32 = '''
def count_sectors(byte_addresses):
    return len(list(byte_addresses)) * 4 // 32
'''


# The folklore's "32×" as a prediction for a stride-4 copy (the sector model says 16 sectors).
FOLKLORE_PREDICTION = '''
predicted_sectors_per_request = 32
'''

# Reads the store twins: right for strided_copy (loads and stores alike), wrong for a gather.
STORES_NOT_LOADS = '''
def load_sectors_per_request(p):
    return (p.value("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
            / p.value("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"))
'''


# Issue 46. The microscope's own sector count, reached through a default argument: the tripwire (0, and why).
SECTORS_BY_DEFAULT = '''
from gpucourse.microscope import analysis


def count_sectors(byte_addresses, _sectors=analysis.sectors):
    return len(_sectors([int(a) for a in byte_addresses], 1))
'''

# Right at the visible sizes only; elsewhere it moves nothing and silences the hidden block (labtools). On
# main the hidden block launched it where the block runs: 3 points.
DRIFT_THAT_SILENCES = SILENCE_THE_GRADER + '''

def to_soa(particles):
    return np.ascontiguousarray(particles.T)


@cuda.jit
def drift_soa(soa, dt):
    i = cuda.grid(1)
    if i == 0 and soa.shape[1] not in (100, 128):
        _silence()
    if i < soa.shape[1] and soa.shape[1] in (100, 128):
        soa[0, i] += soa[3, i] * dt
        soa[1, i] += soa[4, i] * dt
        soa[2, i] += soa[5, i] * dt
'''

# Coalesced, but copies a unscaled and rewrites its input a to a / w, so that a * w is what it wrote: on
# main the coalescing cell compared the visible cell's out with that a (2 points).
WRITES_ITS_INPUT = '''
@cuda.jit
def scale_rows(a, w, out):
    col, row = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        v = a[row, col]
        out[row, col] = v
        a[row, col] = v / w[row]


def launch_config(shape, block=(32, 8)):
    rows, cols = shape
    return ((cols + block[0] - 1) // block[0], (rows + block[1] - 1) // block[1]), block
'''

# A number that says it equals anything: refused as a subclass of float.
SAYS_EQUAL = '''
class _Sectors(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def load_sectors_per_request(p):
    return _Sectors(4)
'''


def test_lab03_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # correct but uncoalesced, in both exercises
        "uncoalesced": with_cells(solution, {"ex2_solution": SOA_AS_TRANSPOSED_VIEW,
                                             "ex3_solution": STILL_COLUMN_WISE}),
        # wrong results; with (issue 46) a kernel that silences the grader and a number that says it is equal
        "wrong": with_cells(solution, {"ex1_solution": BYTES_OVER_32, "ex2_solution": DRIFT_THAT_SILENCES,
                                       "ex3_solution": GRID_NOT_SWAPPED, "ex4_solution": SAYS_EQUAL}),
        # a wrong prediction, and the profile read by the store metrics' names; with (issue 46) the
        # microscope's sector count through a default, and a kernel that writes its input
        "misread": with_cells(solution, {"ex4_predict": FOLKLORE_PREDICTION, "ex4_solution": STORES_NOT_LOADS,
                                         "ex1_solution": SECTORS_BY_DEFAULT, "ex3_solution": WRITES_ITS_INPUT}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex1_solution": BYTES_OVER_32, "ex3_solution": GRID_NOT_SWAPPED})),
    }, tmp_path)
    everything = {"ex1_test": 2, "ex2_result": 3, "ex2_coalesced": 2, "ex3_result": 3, "ex3_coalesced": 2,
                  "ex4_prediction": 1, "ex4_read": 2}
    assert scores["solution"].max_score == 15
    assert scores["solution"].cells == everything and scores["solution"].total == 15
    assert scores["untouched"].total == 0
    # right results with uncoalesced accesses: exactly the coalescing points are lost
    assert scores["uncoalesced"].cells == {**everything, "ex2_coalesced": 0, "ex3_coalesced": 0}
    # wrong results: the result points go, and the coalescing test (which also checks the result) too
    # (the drift that silences the grader loses its result points; a number that says it is equal, its reading)
    assert scores["wrong"].cells == {**everything, "ex1_test": 0, "ex2_result": 0, "ex3_result": 0,
                                     "ex3_coalesced": 0, "ex4_read": 0}
    assert "an object of a subclass of float" in cell_output(scores["wrong"], "ex4_read")
    # a wrong prediction loses its point; reading the stores' metrics loses the reading's 2; the microscope's
    # own count (tripwire) and a kernel that writes its input lose theirs
    assert scores["misread"].cells == {**everything, "ex4_prediction": 0, "ex4_read": 0, "ex1_test": 0,
                                       "ex3_result": 0, "ex3_coalesced": 0}
    assert "forbids: gpucourse.microscope.analysis:sectors" in cell_output(scores["misread"], "ex1_test")

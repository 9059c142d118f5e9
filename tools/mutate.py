"""A small mutation pass: does each rule have a test that fails when the rule is broken?

    python tools/mutate.py            # every mutation; exit 1 if one survives (or is stale)
    python tools/mutate.py --list     # the list, without running anything
    python tools/mutate.py --only fp16-nan-payload alloc-align-32
    python tools/mutate.py --jobs 1   # one at a time (default: two, each in its own copy, on 2 cores)

Each mutation replaces one exact piece of text in one file of a temporary copy of the
repository, runs the test files that cover that rule against the copy (``PYTHONPATH`` and the
working directory point at the copy, so the copy's ``gpucourse`` is the one imported), and puts
the file back. A mutation the tests still pass is a *survivor*: a rule no test can see. A
mutation whose text is no longer in its file is *stale*: update the list when the code moves.
Add a mutation for every rule you fix or add; keep the tests it names fast (``-k``), since the
pass runs one pytest per mutation.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv*", "__pycache__", ".pytest_cache", ".ruff_cache", "_build", "node_modules",
    "*.ipynb", "autograded", "feedback", "submitted", "gradebook.db",
    "build",  # build/: generated (screenshots, the website, the platforms' environments), no test reads it
)
MUTATION_TIMEOUT_S = 600

MICROSCOPE = ["tests/test_microscope_memory.py", "tests/test_microscope_banks.py",
              "tests/test_microscope_races.py", "tests/test_microscope_branches.py"]
OCCUPANCY = ["tests/test_occupancy.py", "tests/test_occupancy_header.py"]
FORMATS = ["tests/test_formats.py"]
WEAK = ["tests/test_weakmemory.py", "-k", "not sample and not figure"]
SCAN = ["tests/test_grading.py", "-k", "tampering or redefining"]
SNAPSHOT = ["tests/test_grading.py", "-k", "snapshot or check or comparison"]
HOLES = ["tests/test_grading.py", "-k", "course_itself or displayed_value or put_back"]
HOOKS = ["tests/test_grading_hooks.py", "-k", "not scan"]
HOOK_SCAN = ["tests/test_grading_hooks.py", "-k", "scan"]
ISOLATION = ["tests/test_grading_isolation.py"]  # issue 46: private namespace, frozen answers, tripwires
HOSTILE_BATCH = ["tests/test_hostile.py", "-k", "exact_score"]  # one real grading batch: about 2 minutes
WARP = ["tests/test_microscope_warp.py"]
OCC_EXPERIMENT = ["tests/test_occupancy_experiment.py"]
WORK = ["tests/test_coalescing_work.py"]  # lesson 03, work per thread
LAB11 = ["tests/test_lab11_root_causes.py"]  # its fast tests (the nbgrader round trip is -k round_trip)


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str  # exact text, found once in the file
    new: str
    breaks: str  # the rule this mutation breaks, in words
    tests: list[str] = field(default_factory=list)  # pytest arguments: files, then any -k
    optional: bool = False  # True: the rule may be removed on purpose; a missing text is "not applicable"


MUTATIONS: list[Mutation] = [
    # --- the harness: what a measurement reports --------------------------------------------------------
    Mutation("median-is-min", "gpucourse/measure/harness.py",
             "median_ms=float(median),", "median_ms=float(min(samples)),",
             "the reported median is the middle sample, not the fastest", ["tests/test_harness.py", "-k", "median"]),
    Mutation("partly-l2-at-4x", "gpucourse/measure/harness.py",
             "if footprint_bytes <= 2 * l2_bytes:", "if footprint_bytes <= 4 * l2_bytes:",
             "a warm working set past 2x the L2 is DRAM traffic", ["tests/test_harness.py", "-k", "levels"]),
    Mutation("batch-past-queue", "gpucourse/measure/harness.py",
             "MAX_BATCH = 256", "MAX_BATCH = 1000",
             "a batch stays within the launch queue an H100 showed", ["tests/test_harness.py", "-k", "queue"]),
    # --- the course's recordings as the lessons draw them ----------------------------------------------
    Mutation("recording-contract-unnamed", "gpucourse/measure/reference.py",
             'return f"{self.contract} contract, {terms.min_total_ms / 1000:g} s of GPU time a point"',
             'return f"{terms.min_total_ms / 1000:g} s of GPU time a point"',
             "a drawn recording's caption names its contract (a quick one is never passed off as full)",
             ["tests/test_recorded_charts.py", "-k", "contract or full_recording"]),
    Mutation("recording-as-your-gpu", "gpucourse/measure/reference.py",
             "(not your GPU), {self.contract_text()}", "{self.contract_text()}",
             "a recording is never presented as the learner's GPU",
             ["tests/test_recorded_charts.py", "-k", "contract"]),
    Mutation("quick-recordings-refused-again", "gpucourse/measure/reference.py",
             '(csv, csv.parent.parent.name, True) for csv in', '(csv, csv.parent.parent.name, True) for csv in [] and',
             "the course's quick recordings are drawn by the lessons, not silently dropped",
             ["tests/test_recorded_charts.py", "-k", "contract"]),
    Mutation("quick-folder-takes-anything", "gpucourse/measure/reference.py",
             "    if not is_quick(meta):\n        raise CourseError(f\"{folder} is a {QUICK_FOLDER}/",
             "    if False:\n        raise CourseError(f\"{folder} is a {QUICK_FOLDER}/",
             "a quick/ folder holds only recordings whose provenance says contract 'quick'",
             ["tests/test_recorded_charts.py", "-k", "stay_in_their_folder"]),
    # --- the microscope: addresses, sectors, banks, races --------------------------------------------
    Mutation("alloc-align-32", "gpucourse/microscope/memory.py",
             "ALLOCATION_ALIGN_BYTES = 256", "ALLOCATION_ALIGN_BYTES = 32",
             "global allocations start 256-byte aligned (cudaMalloc), not just sector aligned", MICROSCOPE),
    Mutation("alloc-no-align", "gpucourse/microscope/memory.py",
             "self._next_global_base = -(-(base + nbytes) // ALLOCATION_ALIGN_BYTES) * ALLOCATION_ALIGN_BYTES",
             "self._next_global_base = base + nbytes",
             "the next allocation starts right after the previous one's last byte", MICROSCOPE),
    Mutation("shared-align-4", "gpucourse/microscope/memory.py",
             "SHARED_ALIGN_BYTES = 16", "SHARED_ALIGN_BYTES = 4",
             "static shared arrays start 16-byte aligned", MICROSCOPE),
    Mutation("sector-64", "gpucourse/microscope/analysis.py",
             "SECTOR_BYTES = 32", "SECTOR_BYTES = 64",
             "global memory is served in 32-byte sectors", MICROSCOPE + ["tests/test_coalescing.py"]),
    Mutation("bank-no-broadcast", "gpucourse/microscope/analysis.py",
             "for word in {a // BANK_WORD_BYTES for a in addresses}:",
             "for word in [a // BANK_WORD_BYTES for a in addresses]:",
             "lanes reading the same word share it (broadcast): only distinct words conflict",
             MICROSCOPE + ["tests/test_tiling.py", "-k", "bank"]),
    Mutation("bank-no-phases", "gpucourse/microscope/analysis.py",
             "return WARP_SIZE if itemsize <= BANK_WORD_BYTES else max(1, BANKS * BANK_WORD_BYTES // itemsize)",
             "return WARP_SIZE",
             "8- and 16-byte accesses are served in 128-byte phases (half or quarter warps)", MICROSCOPE),
    Mutation("barrier-orders-nothing", "gpucourse/microscope/scheduler.py",
             "u.bar_epoch += 1", "u.bar_epoch += 0",
             "a syncthreads orders the accesses of one block before and after it", MICROSCOPE),
    Mutation("banks-16", "gpucourse/microscope/analysis.py",
             "BANKS = 32", "BANKS = 16",
             "shared memory has 32 banks (a stride of 16 words is a 2-way conflict, not conflict-free)",
             MICROSCOPE + ["tests/test_tiling.py", "-k", "bank"]),
    Mutation("sector-straddle-counts-one", "gpucourse/microscope/analysis.py",
             "touched.update(range(address // SECTOR_BYTES, (address + itemsize - 1) // SECTOR_BYTES + 1))",
             "touched.add(address // SECTOR_BYTES)",
             "an element that straddles a sector boundary touches both sectors", MICROSCOPE),
    Mutation("shfl-down-wraps", "gpucourse/microscope/warp.py",
             "return lane + b if lane + b < WARP_SIZE else lane", "return (lane + b) % WARP_SIZE",
             "shfl_down_sync: a lane whose source is past the warp's end keeps its own value", WARP),
    Mutation("shfl-up-wraps", "gpucourse/microscope/warp.py",
             "return lane - b if lane - b >= 0 else lane", "return (lane - b) % WARP_SIZE",
             "shfl_up_sync: a lane whose source is below lane 0 keeps its own value", WARP),
    Mutation("ballot-reversed", "gpucourse/microscope/warp.py",
             "result = sum(1 << lane for lane, p in preds.items() if p)",
             "result = sum(1 << (WARP_SIZE - 1 - lane) for lane, p in preds.items() if p)",
             "ballot_sync sets bit i for lane i", WARP),
    Mutation("atomics-race", "gpucourse/microscope/races.py",
             'both_atomic = op == "atomic" and last[5] == "atomic"', "both_atomic = False",
             "two atomics on one address never race with each other", MICROSCOPE),
    # --- the occupancy calculator ---------------------------------------------------------------------
    Mutation("register-unit-128", "gpucourse/lessons/occupancy/calculator.py",
             "return round_up(registers_per_thread * WARP_SIZE, REGISTER_ALLOCATION_UNIT)",
             "return round_up(registers_per_thread * WARP_SIZE, 128)",
             "registers are allocated per warp in units of 256", OCCUPANCY),
    Mutation("register-file-pooled", "gpucourse/lessons/occupancy/calculator.py",
             "regs_limit = warps_per_sub_partition * SUB_PARTITIONS // warps_per_block",
             "regs_limit = (arch.registers_per_sm // per_warp) // warps_per_block",
             "each of the 4 sub-partitions holds its own quarter of the register file", OCCUPANCY),
    Mutation("blocks-limit-doubled", "gpucourse/lessons/occupancy/calculator.py",
             "blocks_limit = arch.max_blocks_per_sm", "blocks_limit = 2 * arch.max_blocks_per_sm",
             "an SM holds at most its compute capability's number of resident blocks", OCCUPANCY),
    Mutation("shared-no-reservation", "gpucourse/lessons/occupancy/calculator.py",
             "total = shared_bytes_per_block + arch.reserved_shared_per_block_bytes",
             "total = shared_bytes_per_block",
             "the driver reserves 1 KB of shared memory per block (cc >= 8.0)", OCCUPANCY),
    Mutation("warps-round-down", "gpucourse/lessons/occupancy/calculator.py",
             "warps_per_block = -(-threads // WARP_SIZE)",
             "warps_per_block = max(1, threads // WARP_SIZE)",
             "a block's warps are its threads rounded up to 32", OCCUPANCY),
    Mutation("cc86-thread-slots-2048", "gpucourse/hardware.py",
             'ComputeCapability((8, 6), "A10, RTX 30xx", 1536,', 'ComputeCapability((8, 6), "A10, RTX 30xx", 2048,',
             "an SM of cc 8.6 holds 1536 threads (48 warps), not 2048", OCCUPANCY),
    Mutation("shared-granularity-256", "gpucourse/hardware.py",
             'ComputeCapability((9, 0), "H100, H200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128,',
             'ComputeCapability((9, 0), "H100, H200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 256,',
             "cc 9.0 allocates shared memory in 128-byte units", OCCUPANCY),
    # --- number formats -------------------------------------------------------------------------------
    Mutation("fp16-nan-payload", "gpucourse/lessons/precision/formats.py",
             'return 0, all_ones, 1 << (f.mantissa_bits - 1), "nan"', 'return 0, all_ones, 1, "nan"',
             "NaN is the quiet NaN with the top mantissa bit set (fp16 0x7E00, not 0x7C01)", FORMATS),
    Mutation("decode-nan-as-inf", "gpucourse/lessons/precision/formats.py",
             "return sign * math.inf if mantissa_field == 0 else math.nan", "return sign * math.inf",
             "an all-ones exponent with a non-zero mantissa is NaN, not inf", FORMATS),
    Mutation("negative-zero-sign", "gpucourse/lessons/precision/formats.py",
             "sign = 1 if math.copysign(1.0, stored) < 0 else 0", "sign = 1 if stored < 0 else 0",
             "-0 keeps its sign bit", FORMATS),
    Mutation("round-ties-away", "gpucourse/lessons/precision/formats.py",
             "stored = np.rint(magnitude / quantum) * quantum",
             "stored = np.floor(magnitude / quantum + 0.5) * quantum",
             "rounding to nearest breaks ties to even", FORMATS),
    Mutation("e4m3-no-saturation", "gpucourse/lessons/precision/formats.py",
             'Format("fp8_e4m3", "FP8 E4M3 (e4m3fn)", 4, 3, has_inf=False, saturate=True)',
             'Format("fp8_e4m3", "FP8 E4M3 (e4m3fn)", 4, 3, has_inf=False, saturate=False)',
             "E4M3 has no infinity: conversions saturate to ±448 by default", FORMATS),
    Mutation("bf16-8-mantissa-bits", "gpucourse/lessons/precision/formats.py",
             'Format("bf16", "BF16 (bfloat16)", 8, 7)', 'Format("bf16", "BF16 (bfloat16)", 8, 8)',
             "bfloat16 keeps 7 mantissa bits (8 significant bits)", FORMATS),
    Mutation("no-subnormals", "gpucourse/lessons/precision/formats.py",
             "exponent = np.maximum(e - 1, f.emin)  # below emin the spacing stays that of the subnormals",
             "exponent = e - 1",
             "below the smallest normal the spacing stays that of the subnormals (gradual underflow)", FORMATS),
    # --- the weak-memory model --------------------------------------------------------------------------
    Mutation("block-fence-publishes", "gpucourse/lessons/races/weakmemory/models.py",
             '        if scope == "block":\n            return  # block scope: nothing changes for other blocks\n',
             "",
             "a block-scope fence orders nothing for another block", WEAK),
    Mutation("atomic-reads-oldest", "gpucourse/lessons/races/weakmemory/models.py",
             "old, view, _ = h[-1]", "old, view, _ = h[0]",
             "atomics act on the newest value of a location", WEAK),
    Mutation("loads-always-newest", "gpucourse/lessons/races/weakmemory/models.py",
             "        return min(max(lo, last + 1), hi)\n", "        return hi\n",
             "the adversarial chooser reads the stalest value it may (so weak outcomes show)", WEAK),
    Mutation("fence-sc-not-totally-ordered", "gpucourse/lessons/races/weakmemory/models.py",
             "            view = _join(view, self.sc)  # and what every earlier fence.sc published\n", "",
             "two fence.sc are totally ordered: a weak flag between threadfences carries the data", WEAK),
    Mutation("strong-read-acquires-nothing", "gpucourse/lessons/races/weakmemory/models.py",
             "            self.acq[block] = _join(self.acq[block], view)\n", "            pass\n",
             "an atomic read collects what the writer released (acquire pattern with fence.acq_rel)", WEAK),
    Mutation("shared-starts-zeroed", "gpucourse/lessons/races/weakmemory/runs.py",
             'return _shared_garbage(array.dtype) if loc[0] == "shared" else array[index]', "return array[index]",
             "uninitialised shared memory is never zeros under the race scheduler",
             ["tests/test_weakmemory.py", "-k", "garbage"]),
    Mutation("resident-blocks-ignored", "gpucourse/microscope/scheduler.py",
             "for block in self.blocks[: self.resident_blocks]:\n                self.ready.extend(block.threads)\n"
             "            self._next_block = self.resident_blocks",
             "for block in self.blocks:\n                self.ready.extend(block.threads)\n"
             "            self._next_block = len(self.blocks)",
             "only resident_blocks blocks run at once; the next starts when one ends", WEAK),
    # --- the grading tamper scan ------------------------------------------------------------------------
    Mutation("scan-misses-setattr", "gpucourse/tooling/grading/scan.py",
             'elif node.func.id in {"setattr", "delattr"} and', 'elif node.func.id in {"delattr"} and',
             "setattr(module, name, value) on an imported module is tampering", SCAN),
    Mutation("check-accepts-any-truthy", "gpucourse/tooling/grading/hidden.py",
             "if type(ok) not in _BOOLS or not ok:", "if not ok:",
             "check() passes only a real bool (or NumPy bool_) that is True", SNAPSHOT),
    Mutation("custom-comparisons-ignored", "gpucourse/tooling/grading/hidden.py",
             "failed = bool(custom_comparisons())", "failed = False",
             "a hidden block fails when the notebook made a class that decides its own comparisons", SNAPSHOT),
    Mutation("snapshot-skips-closure-cells", "gpucourse/tooling/grading/snapshot.py",
             "            cell.cell_contents = value\n", "            pass\n",
             "the snapshot puts back the closure cells of library functions", SNAPSHOT),
    Mutation("snapshot-skips-defaults", "gpucourse/tooling/grading/snapshot.py",
             "function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults",
             "function.__code__ = code",
             "the snapshot puts back library functions' default argument values", SNAPSHOT),
    Mutation("snapshot-skips-module-attributes", "gpucourse/tooling/grading/snapshot.py",
             "            module.__dict__[key] = value\n", "            pass\n",
             "the snapshot puts back modules' functions (np.allclose replaced through an alias, vars(), a list, "
             "a default argument or a starred setattr)", SNAPSHOT),
    Mutation("snapshot-skips-builtins", "gpucourse/tooling/grading/snapshot.py",
             "            builtins_dict[key] = value\n", "            pass\n",
             "the snapshot puts back the builtins (all, len, ...)", SNAPSHOT),
    # --- issue 46: the answer key out of reach, answers frozen, forbidden calls on a tripwire ---------------
    Mutation("hidden-shares-the-namespace", "gpucourse/tooling/grading/hidden.py",
             "    private = dict(namespace)\n", "    private = namespace\n",
             "a hidden block runs in a private namespace: what it binds is not the notebook's", ISOLATION),
    Mutation("call-on-the-callers-thread", "gpucourse/tooling/grading/frozen.py",
             "        thread.start()\n        thread.join()\n", "        worker()\n",
             "the learner's function runs on a thread of its own: no frame of the test above it", ISOLATION),
    Mutation("observe-on-the-callers-thread", "gpucourse/tooling/grading/frozen.py",
             '    return _report_from(_on_a_thread(run, kernel, "the microscope\'s report of your kernel"))',
             "    return _report_from(run())",
             "the microscope traces a learner's kernel on a thread of its own: its greenlets lead to no frame "
             "of the test", ISOLATION),
    Mutation("observe-not-bound", "gpucourse/tooling/grading/hidden.py",
             "observe=_observe, trace_launch=_trace_launch)", "trace_launch=_trace_launch)",
             "hidden blocks trace learner kernels through the grader's own observe", ISOLATION),
    Mutation("current-frames-show-the-grader", "gpucourse/tooling/grading/frozen.py",
             "    _WAITING.add(waiting)\n", "",
             "while the learner's code runs, sys._current_frames() leaves out the waiting grader's thread",
             ISOLATION),
    Mutation("freeze-accepts-subclasses", "gpucourse/tooling/grading/frozen.py",
             "    if _one_of(kind, _SCALARS):\n        return value\n    if depth",
             "    if isinstance(value, _SCALARS):\n        return value\n    if depth",
             "a subclass of a builtin is not plain data (it can decide its comparisons)", ISOLATION),
    Mutation("freeze-shares-arrays", "gpucourse/tooling/grading/frozen.py",
             'numpy.array(value, dtype=dtype, copy=True, order="C", subok=False)', "value",
             "a frozen array is a copy: what the learner changes later is not what is compared", ISOLATION),
    Mutation("call-misses-hooks", "gpucourse/tooling/grading/frozen.py",
             "    changed = _hooks_state() != before_hooks\n", "    changed = False\n",
             "a tracer, GC callback or import hook left by the learner's call is refused (and put back)", ISOLATION),
    Mutation("tripwire-records-nothing", "gpucourse/tooling/grading/tripwire.py",
             "            if learner_on_stack(sys._getframe(1)):", "            if False:",
             "a forbidden function called from the learner's code is recorded", ISOLATION),
    Mutation("tripwire-wraps-the-attribute-only", "gpucourse/tooling/grading/tripwire.py",
             "        if isinstance(inner, types.FunctionType):\n            self.swap_code(inner, target, reason)",
             "        if isinstance(inner, types.FunctionType):\n            self.replace_attribute("
             "owner, name, target, reason)",
             "a Python function is wrapped on the object itself: a default or closure that holds it trips too",
             ISOLATION),
    Mutation("tripwire-no-boundary", "gpucourse/tooling/grading/tripwire.py",
             "        if code in _BOUNDARIES:\n            return False\n", "",
             "the test cell that calls a hidden block is not the learner's: the grader may call what it forbids",
             ISOLATION),
    Mutation("hidden-ignores-trips", "gpucourse/tooling/grading/hidden.py",
             "if trips is not None and trips.tripped:", "if False:",
             "a tripped wire fails the hidden block with its reason", ISOLATION),
    Mutation("scan-misses-folded-names", "gpucourse/tooling/grading/scan.py",
             "            tampering += found\n", "            tampering += []\n",
             "getattr(f, 'f_' + 'back'): a name folded from constants that reaches a frame internal is tampering",
             SCAN),
    Mutation("scan-misses-built-names", "gpucourse/tooling/grading/scan.py",
             "    if constructed and _builds_names(tree):", "    if False:",
             "a name built at run time, in a cell that spells hidden names, is tampering",
             ["tests/test_grading.py", "-k", "names_built_at_run_time"]),
    Mutation("feedback-hides-refusals", "gpucourse/tooling/grading/preprocessors.py",
             "        if output.ename == REFUSED:", "        if False:",
             "feedback says why an answer was refused or a call forbidden (one line, no hidden data)",
             ["tests/test_grading.py", "-k", "refused_answer_says_why"]),
    Mutation("hidden-block-launches-the-learner", "solutions/lab07_precision/lab07_precision.py",
             "    launch(dot_kahan_kernel, (a.shape[0] + 31) // 32, 32, a.copy(), b.copy(), out)",
             "    dot_kahan_kernel[(a.shape[0] + 31) // 32, 32](a.copy(), b.copy(), out)",
             "a hidden block runs the learner's code only through the grader's gates (freeze, call, launch, "
             "trace_launch): never on its own thread, where its frame holds the expected values",
             ["tests/test_hidden_blocks.py"]),
    Mutation("handed-in-reference-accepted", "gpucourse/tooling/grading/frozen.py",
             "        found = handed_in(value)\n", "        found = None\n",
             "the course's reference handed in as the learner's answer is refused (no learner frame would record it)",
             ISOLATION + ["-k", "handed_in"]),
    Mutation("lab05-share-unchecked", "solutions/lab05_occupancy/lab05_occupancy.py",
             "    check(abs(float(_one) - min(1.0, _warps * _ilp / _n)) < 1e-9)", "    check(True)",
             "lab 05 ex 5: the share of the bandwidth is graded on its own (the cap after the loads)",
             ["tests/test_lab05_occupancy.py", "-k", "exercise_5"]),
    Mutation("scan-misses-eval", "gpucourse/tooling/grading/scan.py",
             '_FORBIDDEN_CALLS = {"exec", "eval", "compile", "__import__"}',
             '_FORBIDDEN_CALLS = {"exec", "compile", "__import__"}',
             "eval() runs code the grader cannot read", SCAN),
    # --- grading holes of issue 32 ---------------------------------------------------------------------
    Mutation("course-changes-ignored", "gpucourse/tooling/grading/snapshot.py",
             'owner == "gpucourse" or owner.startswith("gpucourse.")', "False",
             "a change to the course's own modules, found when a hidden block runs, is tampering", HOLES),
    Mutation("hidden-tests-reached-through-the-package", "gpucourse/tooling/grading/rewrite.py",
             "__import__('importlib').import_module('gpucourse.tooling.grading.hidden').run_hidden_tests",
             "__import__('gpucourse.tooling.grading').tooling.grading.run_hidden_tests",
             "hidden blocks reach run_hidden_tests through sys.modules, not attributes a notebook can swap", HOLES),
    Mutation("displayed-value-is-a-score", "gpucourse/tooling/grading/preprocessors.py",
             'if o.output_type == "execute_result" else o', 'if False else o',
             "a graded cell scores all or nothing: a displayed value is not nbgrader's partial credit", HOLES),
    # --- IPython's hooks (issue 41 part 4) ----------------------------------------------------------------
    Mutation("hook-lists-not-put-back", "gpucourse/tooling/grading/hooks.py",
             "list.__setitem__(container, slice(None), list(contents))", "pass",
             "AST and input transformers and event callbacks added since the header are taken out", HOOKS),
    Mutation("hook-tables-not-put-back", "gpucourse/tooling/grading/hooks.py",
             "            dict.clear(container)\n            dict.update(container, contents)\n",
             "            pass\n", "a callback list swapped in the events table is put back", HOOKS),
    Mutation("hook-methods-on-the-instance-kept", "gpucourse/tooling/grading/hooks.py",
             "dict.pop(current, name, None)", "pass",
             "run_cell, transform_cell, ... replaced on the shell instance are taken out", HOOKS),
    Mutation("hook-objects-not-put-back", "gpucourse/tooling/grading/hooks.py",
             "object.__setattr__(obj, name, value)  # a trait", "pass  # a trait",
             "display_pub, events, CustomTB, ast_transformers swapped for other objects are put back", HOOKS),
    Mutation("grader-skips-the-hook-restore", "gpucourse/tooling/grading/execute.py",
             "integrity = self._restore_before_test_cell(cell)\n", "integrity = None\n",
             "the grader puts IPython's hooks back before each graded cell (labtools.IPYTHON_HOOKS earn 0)",
             HOSTILE_BATCH),
    Mutation("scan-misses-ipython-hooks", "gpucourse/tooling/grading/scan.py",
             "tampering += _ipython_hooks(tree, {**locked, **mine})", "pass",
             "hooks reached through any alias of get_ipython() are tampering", HOOK_SCAN),
    Mutation("scan-misses-shell-aliases", "gpucourse/tooling/grading/scan.py",
             "shells |= {t.id for t in targets if isinstance(t, ast.Name)}", "pass",
             "ip = get_ipython(); ip.events.register(...) is read through the alias", HOOK_SCAN),
    Mutation("deleted-locked-cell-left-out", "gpucourse/tooling/grading/locked.py",
             "        if not locked:\n", "        if not locked or cell_type == \"markdown\":\n",
             "every deleted locked cell is put back, explanations too, so the next one finds its place", HOLES),
    # --- lessons 04a and 04: bytes in flight (branch `ladders`) -----------------------------------------
    Mutation("grid-stride-uncapped", "gpucourse/lessons/reductions/model.py",
             "return max(1, min(resident, blocks_needed(n, block, GRID_STRIDE_PARTIALS)))",
             "return max(1, blocks_needed(n, block, GRID_STRIDE_PARTIALS))",
             "the grid-stride rung launches no more blocks than are resident",
             ["tests/test_reductions_grid_stride.py", "-k", "resident or atomic"]),
    Mutation("littles-law-above-the-ceiling", "gpucourse/measure/calibration.py",
             "return min(float(ceiling_gbps), float(reads_in_flight) / float(latency_ns))",
             "return float(reads_in_flight) / float(latency_ns)",
             "Little's law gives bytes in flight / latency, never above the measured ceiling",
             ["tests/test_reductions_grid_stride.py", "-k", "littles_law"]),
    Mutation("grid-stride-loses-the-ragged-end", "gpucourse/lessons/reductions/kernels.py",
             "        while i < n:  # the ragged end", "        while i + stride < n:  # the ragged end",
             "the grid-stride rung sums every element whatever n and the grid",
             ["tests/test_reductions_grid_stride.py", "-k", "sums_any_size or does_not_divide"]),
    Mutation("torch-required-again", "gpucourse/lessons/reductions/experiments.py",
             'missing = torch_missing() if "torch.sum" in libraries else None', "missing = None",
             "04a's ladder runs without torch, skipping torch.sum with a note (G23)",
             ["tests/test_reductions_grid_stride.py", "-k", "torch"]),
    Mutation("transpose-store-in-the-load-loop", "gpucourse/lessons/tiling/kernels.py",
             "            v[k] = src[y, x] if y < rows and x < cols else float32(0.0)\n"
             "        for k in range(K):  # then the K stores\n",
             "            v[k] = src[y, x] if y < rows and x < cols else float32(0.0)\n"
             "            if y < rows and x < cols:\n                dst[y, x] = v[k]\n"
             "        for k in range(0):  # then the K stores\n",
             "the tile copy issues all its loads before any store (four in flight per thread)",
             ["tests/test_hoisted_loads_ptx.py"]),
    Mutation("padded-transpose-guarded-shared-store", "gpucourse/lessons/tiling/kernels.py",
             "        for k in range(K):\n            buf[ty + k * R, tx] = v[k]  # a warp writes a row of the tile\n",
             "        for k in range(K):\n            if y0 + k * R < rows and x < cols:\n"
             "                buf[ty + k * R, tx] = v[k]  # a warp writes a row of the tile\n",
             "the padded transpose issues its four global loads back to back in sm_90 SASS (issue 48, P1: a guarded "
             "first shared store was scheduled above loads 2-4)",
             ["tests/test_hoisted_loads_sass.py"]),
    # --- issue 48: the first GPU hour (P2, P3, P4, P11, the plan) ---
    Mutation("tier-reads-a-cached-ceiling", "gpucourse/measure/ceilings.py",
             "handed = None if refresh else _handed_on(name)", "handed = None",
             "the GPU tier compares with the copy ceiling its report measured, not a cached one (P4)",
             ["tests/test_ceilings.py", "-k", "hands"]),
    Mutation("targets-cut-by-the-budget", "gpucourse/tooling/gpureport.py",
             "elif left is not None and step.name != TARGETS_TIER and (left <= 0",
             "elif left is not None and (left <= 0",
             "no budget can cut the first reservation's expectations (P11)",
             ["tests/test_gpureport_targets.py", "-k", "budget"]),
    Mutation("one-element-gain-floor-lowered", "tests/gpu_expectations.py",
             "ONE_ELEMENT_FLOOR = 0.97", "ONE_ELEMENT_FLOOR = 0.9",
             "best_copy may not be slower than the one-element copy beyond noise on any GPU (P3)",
             ["tests/test_gpu_expectations.py", "-k", "one_element"]),
    Mutation("reduction-margin-overclaimed", "tests/gpu_expectations.py",
             '"is 1.23×, not more', '"is 2.5×, not more',
             "the reduction's bytes-in-flight margin is the one the recordings give (P2)",
             ["tests/test_gpu_expectations.py", "-k", "reduction_margin"]),
    Mutation("plan-recorded-seconds-unscaled", "gpucourse/tooling/reportplan.py",
             "factor = 1.0 if name in PROFILE_FREE_STEPS else model_s / found.estimate_s", "factor = 1.0",
             "a recorded step's seconds are scaled by how its plan grew since (a bigger sweep is not estimated "
             "at its old seconds)", ["tests/test_gpureport_targets.py", "-k", "last_real_run"]),
    Mutation("plan-measured-from-another-profile", "gpucourse/tooling/reportplan.py",
             "if name in (\"tier\", TARGETS_TIER) or (profile != (\"quick\" if quick else \"full\")",
             "if name in (\"tier\", TARGETS_TIER) or (False",
             "a step's measured seconds come from a real report of its own profile (a quick sweep never stands for "
             "a full one), except the steps whose work is the same in every profile", ["tests/test_gpureport_plan.py",
                                                                                      "-k", "measured"]),
    Mutation("plan-grades-the-known-wrong-on-the-gpu", "gpucourse/tooling/reportplan.py",
             'GRADED = ("solution",)', 'GRADED = ("solution", "untouched", "patched_course")',
             "the full profile grades each lab's solution on the GPU, several labs in one autograde call; the "
             "known-wrong submissions are the CPU suite's", ["tests/test_gpureport_plan.py", "-k", "grad"]),
    Mutation("plan-spread-measures-twice", "gpucourse/tooling/gpureport.py",
             "first = recorded if recorded is not None else _run_sweep(SPREAD_SWEEP, practice, quick)",
             "first = _run_sweep(SPREAD_SWEEP, practice, quick)",
             "the spread step measures its sweep once more beside the sweep step's recording, not twice",
             ["tests/test_gpureport_plan.py", "-k", "spread"]),
    Mutation("plan-flat-rule-ignores-the-spread", "gpucourse/lessons/divergence/experiments.py",
             "<= factor * spread", "<= 1.0",
             "a curve is recorded at fewer points only where it is flat within its recorded spread",
             ["tests/test_gpureport_plan.py", "-k", "flat"]),
    # --- lesson 05's speed experiment (issue 38 item 3): resident grid, Little's-law model, hoisted loads, G20 ---
    Mutation("occupancy-grid-not-resident", "gpucourse/lessons/occupancy/model.py",
             "return int(blocks_per_sm) * int(sm_count)", "return 4 * int(blocks_per_sm) * int(sm_count)",
             "the resident-grid copies launch exactly blocks per SM × SMs", OCC_EXPERIMENT + ["-k", "grid"]),
    Mutation("occupancy-rig-one-block-per-64", "gpucourse/lessons/occupancy/experiments.py",
             "return resident_grid(driver_blocks(name, threads_per_block, dynamic_shared_bytes), self.sm_count)",
             "return math.ceil(COPY_ELEMENTS / threads_per_block)",
             "the memory sweep's grid is the driver's resident blocks, not one block per 64 elements",
             OCC_EXPERIMENT + ["-k", "rig"]),
    Mutation("occupancy-model-load-bytes-only", "gpucourse/lessons/occupancy/model.py",
             "MODEL_BYTES_PER_WARP_COPY = 2 * WARP_SIZE * 4", "MODEL_BYTES_PER_WARP_COPY = WARP_SIZE * 4",
             "a warp copy keeps its load and its store in flight (256 B)", OCC_EXPERIMENT + ["-k", "model or latency"]),
    Mutation("occupancy-model-no-ceiling", "gpucourse/lessons/occupancy/model.py",
             "return np.minimum(1.0, np.asarray(warps, dtype=float) * ilp / self.warps_needed)",
             "return np.asarray(warps, dtype=float) * ilp / self.warps_needed",
             "no more bytes in flight than bandwidth × latency are useful (the model is capped)",
             OCC_EXPERIMENT + ["-k", "model"]),
    Mutation("occupancy-latency-from-full-occupancy", "gpucourse/lessons/occupancy/model.py",
             "return rows.loc[rows.occupancy_pct.idxmin()] if len(rows)",
             "return rows.loc[rows.occupancy_pct.idxmax()] if len(rows)",
             "the recorded latency comes from the latency-bound (lowest-occupancy) ILP-4 point",
             OCC_EXPERIMENT + ["-k", "latency"]),
    Mutation("occupancy-ilp4-store-before-load", "gpucourse/lessons/occupancy/kernels.py",
             "        d = src[i + 3 * step]\n        dst[i] = a\n",
             "        dst[i] = a\n        d = src[i + 3 * step]\n",
             "the ILP-4 copy issues its four loads before any store (hoisted by hand: no noalias)",
             OCC_EXPERIMENT + ["-k", "four_loads"]),
    Mutation("occupancy-fma-one-per-iteration", "gpucourse/lessons/occupancy/kernels.py",
             "FMAS_PER_ITERATION = 8", "FMAS_PER_ITERATION = 1",
             "the FMA kernels run eight FMAs per chain per loop iteration (the reference counts them)",
             ["tests/test_occupancy_lesson.py", "-k", "fma"]),
    Mutation("occupancy-gpu-spills-dropped", "gpucourse/measure/ptxinfo.py",
             'spill_store_bytes=report["spill_store_bytes"] if report else None,', "spill_store_bytes=None,",
             "on a GPU the spills come from ptxas on the device's PTX (G20)",
             ["tests/test_occupancy_ptxinfo.py", "-k", "gpu_mode"]),
    # --- lesson 03, work per thread (issue 38): the Little's-law model, the coarsened copy, the SASS reader ---
    Mutation("inflight-read-only", "gpucourse/lessons/coalescing/inflight.py",
             "return 2 * bytes_in_flight_sm * sms / latency_ns  # bytes per ns = GB/s",
             "return bytes_in_flight_sm * sms / latency_ns  # bytes per ns = GB/s",
             "effective GB/s counts the read and the write: twice the read rate the bytes in flight sustain",
             WORK + ["-k", "by_hand or calibration or model_rows"]),
    Mutation("inflight-no-ceiling", "gpucourse/lessons/coalescing/inflight.py",
             "return min(sustained_gbps(bytes_in_flight_sm, sm_count, latency_ns), float(ceiling_gbps))",
             "return sustained_gbps(bytes_in_flight_sm, sm_count, latency_ns)",
             "no amount of bytes in flight copies faster than the copy ceiling", WORK + ["-k", "by_hand or rows"]),
    Mutation("inflight-needs-the-write-too", "gpucourse/lessons/coalescing/inflight.py",
             "return ceiling_gbps / 2 * latency_ns / sms", "return ceiling_gbps * latency_ns / sms",
             "a copy at the ceiling reads at half of it: only the reads are in flight from load to arrival",
             WORK + ["-k", "calibration"]),
    Mutation("inflight-calibrated-on-four-loads", "gpucourse/measure/calibration.py",
             "latency_from_copy_ns(one_element_gbps, threads_per_sm * ELEMENT_BYTES, int(sm_count))",
             "latency_from_copy_ns(one_element_gbps, 4 * threads_per_sm * ELEMENT_BYTES, int(sm_count))",
             "the calibration point is the one-element copy: one 4-byte load per thread",
             WORK + ["-k", "calibration or rows"]),
    Mutation("tail-rounds-down", "gpucourse/lessons/coalescing/inflight.py",
             "return w / math.ceil(w)", "return w / max(1, round(w))",
             "a partial last wave still takes a whole round of the SMs", WORK + ["-k", "waves"]),
    Mutation("ilp4-wrong-lane-mapping", "gpucourse/lessons/coalescing/kernels.py",
             "j1 = (i + g) * stride + offset", "j1 = (i + 1) * stride + offset",
             "copy_ilp4's second load is one grid further on, with strided_copy's lane-to-element mapping",
             WORK + ["-k", "copies_every or keeps_the_sectors"]),
    Mutation("sass-run-counts-stores", "gpucourse/lessons/coalescing/compiled.py",
             'run = run + 1 if op.startswith("LDG") else 0', 'run = run + 1 if op.startswith(("LDG", "STG")) else 0',
             "a store between two loads ends the run of loads in flight", WORK + ["-k", "sass or 64_bit"]),
    Mutation("warm-up-copy-not-poisoned-again", "gpucourse/lessons/coalescing/experiments.py",
             "dst.fill(np.nan)  # poisoned again: the check must see the timed launches' copy, not this one's",
             "dst.shape  # (mutated: not poisoned again)",
             "the grid-sizing warm-up launch copies too: dst is poisoned again, or the check cannot see a miss",
             WORK + ["-k", "measuring_path"]),
    Mutation("rank-reason-only-failed-logs", "gpucourse/measure/ranklaunch.py",
             "order = failed + [r for r in range(len(procs)) if r not in failed]", "order = failed",
             "a rank that raised and was killed while tearing down is still read: its exception, not a peer's "
             "'terminate called', says why", ["tests/test_ranklaunch.py"]),
    Mutation("rank-reason-keeps-torch-prefix", "gpucourse/measure/ranklaunch.py",
             '_RANK_PREFIX.sub("", line).strip()', "line.strip()",
             "torch's '[rank1]: ' prefix is read past, so the rank's Python exception is found",
             ["tests/test_ranklaunch.py"]),
    # --- lab 09's judge: the replay of the delivered messages, every message a chunk the ring needs ---------
    Mutation("ring-judge-reads-learners-world", "gpucourse/lessons/collectives/experiments.py",
             "    if not kernels.values_match(op, fresh):", "    if not kernels.values_match(op, world):",
             "the values are read on the replay of the delivered messages, never on the learner's world",
             ["tests/test_lab09_judge.py", "-k", "replay_values"]),
    Mutation("ring-judge-counts-twice", "gpucourse/lessons/collectives/experiments.py",
             "        if carried & held:", "        if False:",
             "a reduce-scatter message may not add a rank's data that the receiver already holds",
             ["tests/test_lab09_judge.py", "-k", "chunk_the_step_requires"]),
    Mutation("ring-judge-sum-need-not-grow", "gpucourse/lessons/collectives/experiments.py",
             "        if len(carried) != s + 1:", "        if False:",
             "a ring's step-s message carries a partial sum of s + 1 ranks",
             ["tests/test_lab09_judge.py", "-k", "grow"]),
    Mutation("ring-judge-any-link", "gpucourse/lessons/collectives/experiments.py",
             "            if dst != following[src]:", "            if False:",
             "every message goes to the next rank of the ring order",
             ["tests/test_lab09_judge.py", "-k", "ring_order"]),
    # --- lab 10's evidence in the ranks: payload checksums, overlap, views, a fresh batch, the tripwire -----
    Mutation("ddp-payload-unchecked", "gpucourse/lessons/dataparallel/ranks.py",
             "                and torch.allclose(w, payload.to(w.device), rtol=0.0, atol=1e-6)]", "]",
             "each all-reduce's payload must equal this rank's real gradients of one bucket",
             ["tests/test_lab10_evidence.py", "-k", "checksum or decoys"]),
    Mutation("ddp-first-bucket-missing-assumed", "gpucourse/lessons/dataparallel/ranks.py",
             "first_missing = len(local) - comm.seen[payload_buckets.index(0)][2]",
             "first_missing = len(local) - len(buckets[0])",
             "the gradients still missing when bucket 0's all-reduce starts are counted by the grader's hooks",
             ["tests/test_lab10_evidence.py", "-k", "last_hook"]),
    Mutation("ddp-views-any-storage", "gpucourse/lessons/dataparallel/ranks.py",
             "storage.get(b) == params[i].grad.untyped_storage().data_ptr()", "storage.get(b) is not None",
             "a gradient counts as a view only in the storage of the tensor its bucket's all-reduce was given",
             ["tests/test_lab10_evidence.py", "-k", "copies"]),
    Mutation("ddp-learner-batch-fixed", "gpucourse/lessons/dataparallel/experiments.py",
             "batch_seed = secrets.randbelow(1 << 30) + 2 if reducer else 1", "batch_seed = 1",
             "a learner's Reducer runs on a batch drawn afresh, so no rank can compute another's gradients",
             ["tests/test_lab10_evidence.py", "-k", "own_batch"]),
    Mutation("ddp-rank-guard-unarmed", "gpucourse/lessons/dataparallel/ranks.py",
             "    with (guard(GUARD_TARGETS) if guard else contextlib.nullcontext()) as trips:",
             "    with contextlib.nullcontext() as trips:",
             "the grader's tripwire is armed around the learner's Reducer in each rank",
             ["tests/test_lab10_evidence.py", "-k", "decoys"]),
    Mutation("pingpong-no-second-try", "gpucourse/lessons/collectives/experiments.py",
             "for rounds in (iters, 2 * iters):", "for rounds in (iters,):",
             "timings that do not grow with size are measured once more, with twice the rounds",
             ["tests/test_collectives_gloo.py", "-k", "grow"]),
    # --- issue 47: one calibration per GPU, figures in prose checked against their recordings --------------------
    Mutation("calibration-read-bytes-over-copy-rate", "gpucourse/measure/calibration.py",
             "return reads_in_flight_per_sm * sm_count / (effective_gbps / 2)",
             "return reads_in_flight_per_sm * sm_count / effective_gbps",
             "the loaded latency is read bytes in flight ÷ the *read* rate (half a copy's effective GB/s): the "
             "factor-2 slip that made 04a's bounds twice too generous",
             ["tests/test_calibration.py", "tests/test_reductions_grid_stride.py", "-k", "read_bytes or latency"]),
    Mutation("occupancy-chart-draws-another-model", "gpucourse/lessons/occupancy/figures.py",
             "fig, 100.0 * warps / model.max_warps, model.relative_speed(warps, ilp),",
             "fig, 100.0 * warps / model.max_warps, model.relative_speed(warps, 1),",
             "the chart's dashed lines are the model the text states, for each ILP (W1)",
             ["tests/test_occupancy_lesson.py", "-k", "model_the_text"]),
    Mutation("prose-one-element-copy-from-a-tier-run", "notebooks/03_coalescing.py",
             "the one-element copy at 2,626 of 4,271 GB/s", "the one-element copy at 2,655 of 4,257 GB/s",
             "a figure typed in prose agrees with its recording (W7: one measurement quoted three ways)",
             ["tests/test_figures_in_prose.py"]),
    Mutation("prose-first-attempt-rounded-wrong", "notebooks/05_occupancy.py",
             "measured **841 GB/s at 25 %", "measured **842 GB/s at 25 %",
             "lesson 05's first-attempt figures are the recording's (841.5 GB/s rounds to 841)",
             ["tests/test_figures_in_prose.py", "-k", "05_occupancy"]),
    Mutation("intrinsic-load-not-16-byte-aligned", "gpucourse/lessons/coalescing/wide.py",
             "vec = builder.load(builder.bitcast(builder.gep(base, [args[1]]), _VEC4.as_pointer()), align=16)",
             "vec = builder.load(builder.bitcast(builder.gep(base, [args[1]]), _VEC4.as_pointer()), align=4)",
             "numba-cuda issues LDG.E.128 through an @intrinsic only with the 16-byte alignment it promises (P10)",
             ["tests/test_coalescing_work.py", "-k", "wide_rungs or intrinsic"]),
    Mutation("reductions-unrecorded-rung-not-drawn", "gpucourse/lessons/reductions/figures.py",
             "unrecorded = _in_flight_bound(missing) if missing else None",
             "unrecorded = None",
             "a rung with no recording is drawn as its model bound, labelled so (W5)",
             ["tests/test_reductions_grid_stride.py", "-k", "unrecorded"]),
    Mutation("fit-alpha-beta-unweighted", "gpucourse/lessons/collectives/model.py",
             "weights = [1 / t**2 for t in ts]", "weights = [1.0 for t in ts]",
             "α and β are fitted to the relative error, so the large messages' noise does not set α",
             ["tests/test_collectives_model.py", "-k", "fit"]),
    Mutation("knee-marks-n-star", "gpucourse/lessons/collectives/figures.py",
             "knee = model.knee_bytes(op, alg, ranks, link)", "knee = model.crossover_bytes(link)",
             "lesson 09's chart marks the ring's knee p·αβ that its Predict asks for, not only αβ",
             ["tests/test_lesson_text_07_09_10.py", "-k", "knee"]),
    Mutation("first-bucket-always-small", "gpucourse/lessons/dataparallel/figures.py",
             "return FIRST_BUCKET_BYTES if cap_mib is None else None", "return FIRST_BUCKET_BYTES",
             "the pinned torch keeps the 1 MiB first bucket only while bucket_cap_mb is unset",
             ["tests/test_lesson_text_07_09_10.py", "-k", "first_bucket"]),
    Mutation("mx-ceil-scale-floors", "gpucourse/lessons/precision/blockscaled.py",
             "np.ceil(np.log2(safe / largest))", "np.floor(np.log2(safe / largest))",
             "TransformerEngine's MXFP8 scale is rounded up, so no element saturates",
             ["tests/test_blockscaled.py", "-k", "rounded_up"]),
    # --- lab 11: a fix is judged by what it does (issue 46) ------------------------------------------------
    Mutation("lab11-fresh-inputs-are-the-lab-s", "gpucourse/lessons/rootcauses/model.py",
             "    lab = seed == SEED\n    if name == \"brighten\":", "    lab = True\n    if name == \"brighten\":",
             "another seed draws other inputs of other sizes: a kernel that replays the lab's output fails there",
             LAB11 + ["-k", "replayed"]),
    Mutation("lab11-fresh-seed-fixed", "gpucourse/lessons/rootcauses/experiments.py",
             "return SEED + 1 + secrets.randbelow(10**6)", "return SEED",
             "the grader's extra seed is drawn at random and is never the lab's", LAB11 + ["-k", "fresh_seed"]),
    Mutation("lab11-step-run-with-values", "gpucourse/lessons/rootcauses/experiments.py",
             'META = "meta"', 'META = "cpu"',
             "a fixed step runs where no tensor holds a value, so any host read fails however it is spelled",
             LAB11 + ["-k", "host_read or meta_run"]),
    Mutation("lab11-printing-allowed", "gpucourse/lessons/rootcauses/experiments.py",
             "    tensor_str._str = refuse\n", "    tensor_str._str = original\n",
             "printing a tensor (a host read on a GPU, not on the meta device) fails the meta run",
             LAB11 + ["-k", "host_read and print"]),
    Mutation("lab11-annotation-is-a-parent", "gpucourse/lessons/rootcauses/model.py",
             "while parent is not None and not _is_operator(parent):", "while False:",
             "a profiler annotation around a loop does not hide the loop's operators from the count",
             LAB11 + ["-k", "annotations"]),
    Mutation("lab11-subclass-answers", "gpucourse/lessons/rootcauses/experiments.py",
             "return answer if type(answer) is str else None", "return answer if isinstance(answer, str) else None",
             "answers are compared only as plain data: a str subclass equal to everything is refused",
             LAB11 + ["-k", "plain_data"]),
    # issue 49, the attention capstone: the online softmax's rescaling, the causal tile count, the kernel's skip
    Mutation("online-softmax-forgets-the-rescale", "gpucourse/lessons/attention/online.py",
             "alpha[:, None] * acc + p @ v_block", "acc + p @ v_block",
             "a new, larger row maximum rescales the running output (tile_step, online_softmax)",
             ["tests/test_attention_model.py", "-k", "online or tile_step"]),
    Mutation("flash-causal-reads-only-the-rows-it-needs", "gpucourse/lessons/attention/model.py",
             "return sum(min(n, ((min((i + 1) * br, n) - 1) // bc + 1) * bc) for i in range(q_tiles(n, br)))",
             "return sum(min((i + 1) * br, n) for i in range(q_tiles(n, br)))",
             "a causal Q tile loads whole K/V tiles up to the diagonal, not just the columns it keeps",
             ["tests/test_attention_model.py", "-k", "brute_force or hand_worked"]),
    Mutation("flash-kernel-skips-the-diagonal-tile", "gpucourse/lessons/attention/kernels.py",
             "end = tl.minimum((tile + 1) * BLOCK_M, n_ctx)", "end = tl.minimum(tile * BLOCK_M, n_ctx)",
             "the causal kernel visits every K/V tile at or left of the diagonal (against SDPA, interpreted)",
             ["tests/test_attention_triton.py", "-k", "sdpa and True"]),
    # issue 49 parts 6 and 8 (Triton infrastructure): compile-check's tensor-core claims, the runners' refusals,
    # the interpreter's fix for Triton 3.6 with NumPy 2.4
    Mutation("triton-claim-hopper-is-mma-sync", "gpucourse/tooling/tritoncheck.py",
             "90: WGMMA,", "90: MMA_SYNC,",
             "compile-check says sm_90 gets wgmma/HGMMA from Triton, as the lessons teach",
             ["tests/test_compile_check.py", "-k", "judges"]),
    Mutation("triton-claims-not-judged", "gpucourse/tooling/tritoncheck.py",
             "if tuple(used) != ((expected,) if expected else ()):", "if False:",
             "a Triton kernel compiled to other tensor cores than the lessons say fails compile-check",
             ["tests/test_compile_check.py", "-k", "judges"]),
    Mutation("triton-tensor-cores-from-ptx-alone", "gpucourse/tooling/tritoncheck.py",
             "if ptx_counts.get(f[0]) and sass_counts.get(f[1])", "if ptx_counts.get(f[0]) or sass_counts.get(f[1])",
             "a tensor-core instruction counts only when both the PTX and the SASS hold it",
             ["tests/test_compile_check.py", "-k", "judges"]),
    Mutation("triton-kernels-left-out-of-compile-check", "gpucourse/tooling/compilecheck.py",
             "ALL_KERNELS = KERNELS + LAB_KERNELS + TRITON_KERNELS", "ALL_KERNELS = KERNELS + LAB_KERNELS",
             "compile-check compiles the Triton kernels, and --only triton: selects them",
             ["tests/test_compile_check.py", "-k", "listed_and_selected"]),
    Mutation("triton-36-interpreter-unfixed", "gpucourse/measure/tritonmode.py",
             'scope.set_attr(tensor, "__index__", _scalar_index)', "pass",
             "Triton 3.6's interpreter (CUDA 12 lock) runs loops over scalars with NumPy 2.4",
             ["tests/test_tritonmode.py", "-k", "triton_36"]),
    Mutation("matmul-tile-rounds-floats", "gpucourse/lessons/tensorcores/model.py",
             "return operator.index(x)", "return int(x)",
             "a tile of 16.5 is refused, not rounded down to 16",
             ["tests/test_triton_inputs.py", "-k", "tiles_that"]),
    Mutation("matmul-reads-masked-values", "gpucourse/lessons/tensorcores/model.py",
             "if isinstance(x, np.ma.MaskedArray):", "if False:",
             "a masked array is refused: the kernel would read its masked values",
             ["tests/test_triton_inputs.py", "-k", "matmul_refuses_bad"]),
    Mutation("flash-offsets-wrap", "gpucourse/lessons/attention/experiments.py",
             "if q.numel() > MAX_ELEMENTS:", "if False:",
             "tensors past the kernel's 32-bit offsets are refused before launch",
             ["tests/test_triton_inputs.py", "-k", "32_bit"]),
    Mutation("flash-forward-takes-grad", "gpucourse/lessons/attention/experiments.py",
             "if t.requires_grad and torch.is_grad_enabled():", "if False:",
             "the forward-only kernel refuses tensors that expect a backward pass",
             ["tests/test_triton_inputs.py", "-k", "flash_attention_refuses"]),
    # issue 50: rank processes start lean (the course's packages bare), importing this copy of the course
    Mutation("rank-start-not-lean", "gpucourse/measure/ranklaunch.py",
             "    return preamble + program", "    return program",
             "a rank's process imports only what it names, from this copy of the course (ranklaunch.lean_start)",
             ["tests/test_ranklaunch.py", "-k", "lean"]),
    Mutation("browser-settled-read-twice", "tests/browser.py",
             "    return settled.json_value()", "    return chart_state(chart)",
             "the browser test reads a chart's state in the same check that saw it settled (a flake in CI)",
             ["tests/test_browser.py", "-k", "settled_state"]),
    # issue 50: gloo ranks fork from one parent that imported torch (one import a run, not one a rank)
    Mutation("ranks-never-fork", "gpucourse/measure/ranklaunch.py",
             "    return bool(preload) and sys.platform == \"linux\" and all(",
             "    return False and all(",
             "on Linux, ranks with a preload are forked from one parent that imported it",
             ["tests/test_ranklaunch.py", "-k", "forked_rank or gloo_ranks_fork"]),
    Mutation("lesson-ranks-without-preload", "gpucourse/measure/ranklaunch.py",
             "    return \"torch.distributed\" if backend == \"gloo\" else None", "    return None",
             "lessons 09 and 10's gloo ranks ask for the torch preload",
             ["tests/test_ranklaunch.py", "-k", "gloo_ranks_fork"]),
    # issue 50: grading kernels fork from a template that imported the lab's libraries, and are the same kernel
    Mutation("grading-kernels-never-fork", "gpucourse/tooling/grading/forkkernel.py",
             "    if not sys.platform.startswith(\"linux\") or not hasattr(os, \"pidfd_open\"):",
             "    if True:", "on Linux, a simulator's grading kernel is a fork of the template",
             ["tests/test_forkkernel.py", "-k", "launch_gives"]),
    Mutation("forked-kernel-unsandboxed", "gpucourse/tooling/grading/forkkernel.py",
             "        restrict(request[\"spec\"], request[\"argv\"])\n", "        pass\n",
             "a forked kernel is under the same Landlock sandbox as a launched one",
             ["tests/test_forkkernel.py", "-k", "launch_gives"]),
    Mutation("forked-kernel-keeps-the-template-socket", "gpucourse/tooling/grading/forkkernel.py",
             "        os.close(control.detach())  # first", "        pass  # first",
             "a forked kernel holds nothing that reaches its template",
             ["tests/test_forkkernel.py", "-k", "launch_gives"]),
    Mutation("forked-kernel-in-the-templates-folder", "gpucourse/tooling/grading/forkkernel.py",
             "        os.chdir(request[\"cwd\"])\n", "        pass\n",
             "a forked kernel runs in its notebook's folder, as a launched one",
             ["tests/test_forkkernel.py", "-k", "launch_gives"]),
    Mutation("forked-kernel-end-polled", "gpucourse/tooling/grading/forkkernel.py",
             "                await process.ended()\n", "                pass\n",
             "the grader learns a forked kernel ended from its pidfd, not jupyter_client's 0.1 s poll",
             ["tests/test_forkkernel.py", "-k", "pidfd"]),
    Mutation("grader-header-freezes-nothing", "gpucourse/tooling/grading/header.py",
             "    _gpucourse_gc.freeze()", "    _gpucourse_gc.collect()",
             "the grader's header freezes what it loaded, after its snapshot, and garbage is still collected",
             ["tests/test_grading.py", "-k", "header_snapshots and lab00a"]),
    Mutation("platform-labs-any-score", "tests/platforms.py",
             "        assert ok, line", "        assert ok or line, line",
             "make test-platforms' nocuda lane fails when a lab's known submission scores other than expected",
             ["tests/test_platforms_grading.py", "-k", "not for_real"]),
    Mutation("platform-triton-lab-any-error", "tests/platforms.py",
             "assert (error.ename, error.evalue) == (REFUSED, CANNOT_CHECK)", "assert error",
             "without Triton, lab 12's solution may lose only cells refused in one line: this grader cannot check it",
             ["tests/test_platforms_grading.py", "-k", "without_triton"]),
    Mutation("grader-without-triton-says-re-read", "gpucourse/tooling/grading/hidden.py",
             "failed, why = True, (CANNOT_CHECK if not triton_available() else None)", "failed = True",
             "a grader without Triton says it cannot check a Triton cell, not 're-read the specification'",
             ["tests/test_hidden_without_triton.py"]),
    Mutation("test-run-freezes-nothing", "tests/conftest.py", "    gc.freeze()", "    gc.collect()",
             "pytest freezes what its collection made, and the tests' own garbage is still collected",
             ["tests/test_suite_speed.py"]),
    # --- CI stop 55: a headless kernel that did not start failed the website ---
    Mutation("headless-kernel-on-tcp-ports", "gpucourse/tooling/headless.py", '        km.transport = "ipc"\n', "",
             "the website's and the lesson tests' kernels talk over IPC files, with no TCP port to lose",
             ["tests/test_headless.py"]),
    Mutation("headless-retries-a-dead-notebook", "gpucourse/tooling/headless.py",
             "if client.kernel_answered or attempt", "if attempt",
             "only a kernel that never answered is started again; a notebook that killed its kernel is an error",
             ["tests/test_headless.py"]),
    # --- issue 50: numba's simulator without busy polling (measure/simblocks.py) ---
    Mutation("simblocks-barrier-opens-early", "gpucourse/measure/simblocks.py",
             "len(self.waiting) == self.live", "len(self.waiting) >= 1",
             "a barrier opens only when every live thread of the block waits in it", ["tests/test_simblocks.py"]),
    Mutation("simblocks-opens-after-a-failure", "gpucourse/measure/simblocks.py",
             "if self.failed is None and self.waiting", "if self.waiting",
             "a thread's exception keeps the barrier shut: the block is aborted, as numba's manager does",
             ["tests/test_simblocks.py"]),
    Mutation("simblocks-not-installed", "gpucourse/measure/runtime.py",
             "    simblocks.install_when_imported()", "    pass",
             "simulator mode puts the scheduler into numba's simulator as soon as it is imported",
             ["tests/test_simblocks.py"]),
    # --- issue 48 item 4: the full profile planned in 20 minutes (gpureport's plan) ---
    Mutation("plan-moves-by-the-chart-rule", "gpucourse/tooling/widgetrun.py",
             "    moves = counted_moves().get(Path(path).stem)\n", "    moves = None\n",
             "a lesson's widgets step is priced by its counted moves, not ten a chart",
             ["tests/test_widgetrun.py", "-k", "counted_moves"]),
    Mutation("divergence-measures-every-point", "gpucourse/lessons/divergence/experiments.py",
             "        if key in launches:", "        if False:",
             "the divergence sweep measures each distinct launch once (the ends shared by every placement)",
             ["tests/test_gpureport_plan.py", "-k", "distinct_launch"]),
    Mutation("plan-tier-counts-marks-in-strings", "gpucourse/tooling/reportplan.py",
             "if marks_gpu_in_code(p.read_text(encoding=\"utf-8\")))",
             "if GPU_MARK in p.read_text(encoding=\"utf-8\"))",
             "the tier (and its estimate) holds the files that mark GPU tests in code, not a CPU test that writes one "
             "as text", ["tests/test_gpureport_steps.py", "-k", "cpu_test"]),
    Mutation("plan-grading-shared-evenly", "gpucourse/tooling/reportplan.py",
             "heapq.heapreplace(free_at, free_at[0] + lab_grade_s(lab))",
             "free_at[0] += lab_grade_s(lab) / len(free_at); free_at.sort()",
             "the grade call is planned as its workers take the labs in order (the last one done), not the labs' "
             "sum shared evenly", ["tests/test_gpureport_plan.py", "-k", "workers_take"]),
    Mutation("plan-grading-runs-one-worker", "gpucourse/tooling/gpureport.py",
             "jobs=GRADE_JOBS)", "jobs=1)",
             "the grade step grades its labs with the workers its plan counts on (GRADE_JOBS)",
             ["tests/test_gpureport_plan.py", "-k", "one_call"]),
    Mutation("plan-prestart-overlaps-more-than-the-step-before", "gpucourse/tooling/reportplan.py",
             "ahead = round(min(STARTUP_S, before.estimate_s), 1)", "ahead = STARTUP_S",
             "a lesson started ahead saves at most the start-up that overlaps the step before it, never more",
             ["tests/test_widgetrun_prestart.py", "-k", "plan"]),
    Mutation("plan-prestart-off-a-recorded-lesson", "gpucourse/tooling/reportplan.py",
             "if step.name.startswith(\"widgets \") and step.source.startswith(\"estimate\"):",
             "if step.name.startswith(\"widgets \"):",
             "a lesson's recorded seconds already leave its start-up out (counted from its go): not taken off twice",
             ["tests/test_widgetrun_prestart.py", "-k", "recorded"]),
    Mutation("prestart-runs-before-its-go", "gpucourse/tooling/widgetrun.py",
             "if sys.stdin.readline().strip() != \"go\":", "if False:",
             "a child started ahead runs no cell before the report gives its go (the lesson before still runs)",
             ["tests/test_widgetrun_prestart.py", "-k", "waits or stopped"]),
    Mutation("prestart-skips-a-resumed-step-wrongly", "gpucourse/tooling/gpureport.py",
             "following = next((s for s in later if s.status not in (\"done\", \"failed\")), None)",
             "following = next(iter(later), None)",
             "the report starts ahead the next lesson it will run, not one a resumed report kept",
             ["tests/test_widgetrun_prestart.py", "-k", "next_pending"]),
    Mutation("plan-flat-two-paths-also-unequal", "gpucourse/lessons/divergence/experiments.py",
             "flat = [p for p in placements if p in FLAT_TWO_PATHS] if body_a == body_b else []",
             "flat = [p for p in placements if p in FLAT_TWO_PATHS]",
             "only clustered two_paths with equal bodies is flat in its recording: a cheap path B keeps every fraction",
             ["tests/test_gpureport_plan.py", "-k", "flat"]),
    Mutation("plan-flat-curve-own-reference", "gpucourse/lessons/divergence/experiments.py",
             "    frame = pd.concat(frames, ignore_index=True)\n    frame[\"relative_time\"]",
             "    frame = pd.concat(frames, ignore_index=True)\n    frame[\"_unused\"]",
             "a thinned curve's times stay relative to fraction 1 over all its placements, as one call gave",
             ["tests/test_gpureport_plan.py", "-k", "flat"]),
    Mutation("prestart-in-a-rehearsal", "gpucourse/tooling/gpureport.py",
             "            if not practice:  # a rehearsal skips the lessons (_run_step): nothing to start ahead\n",
             "            if True:\n",
             "a rehearsal, which skips the lessons, starts no lesson's child Python ahead",
             ["tests/test_widgetrun_prestart.py", "-k", "rehearsal"]),
    # issue 49, lesson 11 (tensor cores from Python): the recordings stand in without Triton; counts from shapes
    Mutation("tensorcores-compiles-without-triton", "gpucourse/lessons/tensorcores/recordings.py",
             "    if tritonmode.triton_available():\n        facts = compiled.compile_for(",
             "    if True:\n        facts = compiled.compile_for(",
             "without Triton (macOS, Windows) the lesson reads the committed CPU recordings, never compiles",
             ["tests/test_tensorcores_lesson.py", "-k", "without_triton"]),
    Mutation("tensorcores-hmma-count-per-tile", "gpucourse/lessons/tensorcores/figures.py",
             "return block_m * block_n * block_k // (m * n * k) // num_warps",
             "return block_m * block_n * block_k // (m * n * k)",
             "the mma.sync count a warp issues is the tile's multiply-adds over the instruction's, shared by the warps",
             ["tests/test_tensorcores_lesson.py", "-k", "instruction_counts or typed_numbers"]),
    Mutation("tensorcores-roof-invents-a-slope", "gpucourse/lessons/tensorcores/figures.py",
             '"stream": None},  # gpu-stream has no Blackwell',
             '"stream": "NVIDIA H200"},  # gpu-stream has no Blackwell',
             "a generation without published bandwidth gets a roof and no slope (nothing invented)",
             ["tests/test_tensorcores_lesson.py", "-k", "roofs"]),
    # lesson 12 "Attention": the recording shown without Triton, the byte check the prose rests on, the GPU tiles
    Mutation("attention-lesson-ignores-missing-triton", "gpucourse/lessons/attention/recorded.py",
             "    if not tritonmode.triton_available():", "    if False:",
             "without Triton the lesson shows the committed CPU recording, labelled, and runs nothing",
             ["tests/test_attention_lesson.py", "-k", "without_triton"]),
    Mutation("attention-traffic-check-one-head", "gpucourse/lessons/attention/figures.py",
             'heads = case["batch"] * case["heads"]', "heads = 1",
             "the model's bytes are per (batch, head): a case with several heads moves that many times more",
             ["tests/test_attention_lesson.py", "-k", "bears_out"]),
    Mutation("attention-gpu-tiles-too-few-warps", "gpucourse/lessons/attention/timing.py",
             "return bm, bn, (8 if bm * d >= 128 * 128 else 4), stages", "return bm, bn, 4, stages",
             "a 128×128 fp32 accumulator gets 8 warps in the GPU timing (the tier's settings)",
             ["tests/test_attention_lesson.py", "-k", "timing_settings"]),
    # issue 49, lab 12: fits graded at the 99-KB edge, the grader's compile out of the notebook's reach, evidence
    Mutation("lab12-fits-edge-untested", "solutions/lab12_tensor_cores/lab12_tensor_cores.py",
             '[(16, 64, "float16"), (64, 16, "bfloat16")]', '[(16, 64, "float32"), (64, 16, "float32")]',
             "lab 12 ex 1: the SM's carve-out (100 KB) for what one block may have (99 KB) scores 0 on fits",
             ["tests/test_lab12_tensor_cores.py", "-k", "exercise_1"]),
    Mutation("lab12-fresh-compile-inherits-the-environment", "gpucourse/lessons/tensorcores/fresh.py",
             "env=env, cwd=tmp", "env={**env, **os.environ}, cwd=tmp",
             "the grader's compile runs in a child the notebook's environment (a planted Triton cache) cannot reach",
             ["tests/test_lab12_tensor_cores.py", "-k", "planted_paths"]),
    Mutation("lab12-evidence-unchecked", "solutions/lab12_tensor_cores/lab12_tensor_cores.py",
             'check({key: _evidence["H100"][key] for key', 'check(True or {key: _evidence["H100"][key] for key',
             "lab 12 ex 2: the evidence must be what the grader's own compile reports",
             ["tests/test_lab12_tensor_cores.py", "-k", "exercise_2_graded"]),
    # issue 49 part 4: a forbidden function handed in inside functools.partial (or a cache, a bound method)
    Mutation("handed-in-misses-partial", "gpucourse/tooling/grading/tripwire.py",
             "        todo += held_by_wrapper(value)\n", "",
             "functools.partial(forbidden) handed to the grader is refused like the function itself",
             ISOLATION + ["-k", "standard_library_wrapper"]),
    Mutation("reaches-package-misses-partial", "gpucourse/tooling/grading/hidden.py",
             "    held = held_by_wrapper(fn)  #", "    held = []  #",
             "a notebook name bound to functools.partial(course function) reaches the course",
             ["tests/test_grading.py", "-k", "partial_and_cache"]),
    Mutation("attention-by-tiles-drops-the-partial-tile", "gpucourse/lessons/attention/online.py",
             "    for start in range(0, k.shape[0], block):",
             "    for start in range(0, k.shape[0] - block + 1, block):",
             "lab 13's fold calls the learner's step on every K/V tile, the last partial one too",
             ["tests/test_attention_model.py", "-k", "attention_by_tiles"]),
]


def copy_repository(dest: Path) -> Path:
    target = dest / "repo"
    shutil.copytree(ROOT, target, ignore=COPY_IGNORE, symlinks=True)
    return target


def environment(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [os.environ.get("PYTHONPATH", "")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a stale .pyc must never hide a mutation
    return env


def run_tests(copy: Path, tests: list[str], timeout_s: int) -> tuple[int, str]:
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    try:
        done = subprocess.run(command, cwd=copy, env=environment(copy), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout_s} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def check_imports_the_copy(copy: Path) -> None:
    probe = subprocess.run([sys.executable, "-c", "import gpucourse; print(gpucourse.__file__)"], cwd=copy,
                           env=environment(copy), capture_output=True, text=True, check=False)
    where = probe.stdout.strip()
    if not where.startswith(str(copy)):
        raise SystemExit(f"the copy's gpucourse is not the one imported ({where or probe.stderr.strip()})")


def baseline_selections(chosen: list[Mutation]) -> list[list[str]]:
    """The unmutated runs that cover every chosen mutation's tests in few pytest start-ups (issue 50: 78
    selections were 78 start-ups of about 2 s of CPU each; now 25). The selections of one set of files are
    joined into one ``-k`` (``(a) or (b)``); every file some selection takes whole runs in one pytest,
    which holds every ``-k`` selection of those files too. A run passes exactly when each selection in it
    passes, so a failing test is still found before it "kills" every mutation."""
    groups: dict[tuple[str, ...], set[str | None]] = {}
    for m in chosen:
        cut = m.tests.index("-k") if "-k" in m.tests else len(m.tests)
        groups.setdefault(tuple(m.tests[:cut]), set()).add(m.tests[cut + 1] if cut < len(m.tests) else None)
    whole = list(dict.fromkeys(f for files, ks in sorted(groups.items()) if None in ks for f in files))
    runs = [whole] if whole else []
    for files, ks in sorted(groups.items()):
        if None not in ks and not set(files) <= set(whole):
            runs.append([*files, "-k", " or ".join(f"({k})" for k in sorted(ks))])
    return runs


def apply(copy: Path, m: Mutation) -> str | None:
    """Mutate the copy's file; return its original text, or None when the text is not there."""
    path = copy / m.file
    text = path.read_text()
    count = text.count(m.old)
    if count == 0:
        return None
    if count > 1:
        raise SystemExit(f"{m.name}: the text occurs {count} times in {m.file}; make it unique")
    path.write_text(text.replace(m.old, m.new))
    return text


def run_one(copies: queue.Queue, m: Mutation, timeout_s: int) -> tuple[str, str, float]:
    """One mutation in a copy no other job is using: its verdict, pytest's last line, seconds."""
    copy = copies.get()
    try:
        start = time.monotonic()
        original = apply(copy, m)
        if original is None:
            return ("not applicable" if m.optional else "stale"), f"text not in {m.file}", time.monotonic() - start
        try:
            rc, last = run_tests(copy, m.tests, timeout_s)
        finally:
            (copy / m.file).write_text(original)
        return {0: "survived", 1: "killed"}.get(rc, "error"), last, time.monotonic() - start
    finally:
        copies.put(copy)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="names of the mutations to run")
    parser.add_argument("--list", action="store_true", help="print the list and exit")
    parser.add_argument("--timeout", type=int, default=MUTATION_TIMEOUT_S, help="seconds per mutation")
    parser.add_argument("--no-baseline", action="store_true", help="skip checking the tests pass unmutated")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="mutations run at once, each in its own copy of the repository (default: 2 on 2 cores)")
    args = parser.parse_args(argv)
    names = {m.name for m in MUTATIONS}
    if len(names) != len(MUTATIONS):
        raise SystemExit("two mutations share a name")
    unknown = set(args.only or ()) - names
    if unknown:
        raise SystemExit(f"no mutation named {', '.join(sorted(unknown))}; see --list")
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:24} {m.file:36} {m.breaks}")
        return 0

    results: dict[str, list[str]] = {"killed": [], "survived": [], "stale": [], "not applicable": [],
                                     "error": []}
    jobs = max(1, min(args.jobs, len(chosen)))
    with tempfile.TemporaryDirectory(prefix="gpucourse-mutate-") as tmp:
        # one copy per job: a job mutates its own copy's file and puts it back before the next takes it
        copies: queue.Queue = queue.Queue()
        for job in range(jobs):
            copy = copy_repository(Path(tmp) / f"job{job}")
            check_imports_the_copy(copy)
            copies.put(copy)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            if not args.no_baseline:  # a failing test would "kill" every mutation: check the tests pass first
                def unmutated(tests: tuple[str, ...]) -> tuple[tuple[str, ...], int, str]:
                    copy = copies.get()
                    try:
                        return (tests, *run_tests(copy, list(tests), args.timeout))
                    finally:
                        copies.put(copy)

                for tests, rc, last in pool.map(unmutated, map(tuple, baseline_selections(chosen))):
                    if rc != 0:
                        print(f"baseline: {' '.join(tests)} fails unmutated ({last}); fix that first")
                        return 2
            # results are printed in the list's order, each as soon as it and those before it are done
            for m, (verdict, last, seconds) in zip(chosen, pool.map(lambda m: run_one(copies, m, args.timeout),
                                                                     chosen)):
                results[verdict].append(m.name)
                print(f"{verdict:>14}  {m.name:24} {seconds:6.1f} s  {last}", flush=True)
    print()
    for verdict, found in results.items():
        print(f"{verdict}: {len(found)}" + (f" ({', '.join(found)})" if found and verdict != "killed" else ""))
    return 1 if results["survived"] or results["stale"] or results["error"] else 0


if __name__ == "__main__":
    sys.exit(main())

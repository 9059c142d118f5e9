"""Issue 46, in process: hidden blocks run in a private namespace, answers are frozen to plain data before
any comparison, the learner's functions run on a thread of their own, and forbidden functions trip however
they are reached (a default, a closure, a name built at run time). The same attacks go through the real
grader in tests/test_hostile.py and the labs' round trips."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gpucourse.tooling.grading import GENERIC_FAILURE, HiddenTestFailed, run_hidden_tests
from gpucourse.tooling.grading.frozen import AnswerRefused, call, call_each, freeze
from gpucourse.tooling.grading.hidden import forbidden_targets
from gpucourse.tooling.grading.tripwire import armed, is_learner_code, resolve

LEARNER_FILE = "/tmp/ipykernel_4242/2718281828.py"  # where IPython keeps a notebook cell's code


def learner(source: str, **names) -> dict:
    """A notebook namespace holding ``source``, compiled as a cell's code is."""
    namespace = {"__name__": "__main__", "np": np, **names}
    exec(compile(source, LEARNER_FILE, "exec"), namespace)  # noqa: S102
    return namespace


FRAME_WALK = '''
import sys


def add_one(x):
    frame = sys._getframe(1)
    while frame is not None:  # every frame up the stack, and each one's variables
        for scope in (frame.f_locals, frame.f_globals):
            if "expected" in scope:
                return scope["expected"][x]
        frame = frame.f_back
    return x
'''
HIDDEN_DIRECT = "expected = {7919: 7920}\ncheck(add_one(7919) == 7920)"
HIDDEN_CALLED = "expected = {7919: 7920}\ncheck(call(add_one, 7919) == 7920)"


def test_the_learner_code_is_a_cell_and_the_libraries_are_not():
    assert is_learner_code(compile("1", LEARNER_FILE, "exec"))
    assert is_learner_code(compile("1", "<ipython-input-3-abc>", "exec"))
    assert not is_learner_code(threading.Thread.run.__code__)
    assert not is_learner_code(np.testing.assert_allclose.__code__)
    assert not is_learner_code(run_hidden_tests.__code__)
    assert not is_learner_code(compile("1", "<hidden tests>", "exec"))


def test_what_a_hidden_block_binds_stays_private():
    namespace = learner("def add_one(x):\n    return x + 1\n")
    run_hidden_tests("expected = {7919: 7920}\ncheck(call(add_one, 7919) == expected[7919])", namespace)
    assert "expected" not in namespace and "check" not in namespace and "call" not in namespace
    assert "add_one" in namespace  # the notebook's own names are untouched
    peeks = learner("def add_one(x):\n    return globals().get('expected', {}).get(x, x)\n")  # its globals
    with pytest.raises(HiddenTestFailed):
        run_hidden_tests(HIDDEN_CALLED, peeks)


def test_walking_up_frames_finds_no_expected_value():
    # the attack works on a function the hidden block calls itself (why hidden blocks use `call`) …
    run_hidden_tests(HIDDEN_DIRECT, learner(FRAME_WALK))
    # … and finds nothing from the thread `call` runs it on: the wrong answer fails
    with pytest.raises(HiddenTestFailed) as info:
        run_hidden_tests(HIDDEN_CALLED, learner(FRAME_WALK))
    assert str(info.value) == GENERIC_FAILURE


@pytest.mark.parametrize(("source", "words"), [
    ("class Lazy:\n    def __eq__(self, other):\n        return True\n\n\ndef add_one(x):\n    return Lazy()\n",
     "is an object of a class of your own"),
    ("class Int(int):\n    pass\n\n\ndef add_one(x):\n    return Int(x + 1)\n", "a subclass of int"),
    ("from collections import UserDict\n\n\ndef add_one(x):\n    return UserDict({0: x + 1})\n", "`UserDict`"),
    ("def add_one(x):\n    return [x + 1, lambda: 0]\n", "an element of what your function returned"),
    ("def add_one(x):\n    return np.array([x + 1], dtype=object)\n", "dtype object"),
])
def test_an_answer_that_is_not_plain_data_is_refused_with_a_reason(source, words):
    with pytest.raises(HiddenTestFailed) as info:
        run_hidden_tests(HIDDEN_CALLED, learner(source))
    assert words in str(info.value) and "7920" not in str(info.value)


def test_a_lazy_mapping_never_runs_inside_the_comparison():
    source = '''
import collections.abc


class Answers(collections.abc.Mapping):  # __eq__ inherited from Mapping runs __getitem__ and __iter__
    def __getitem__(self, key):
        raise SystemExit  # would run inside the grader's comparison
    def __iter__(self):
        return iter(["A"])
    def __len__(self):
        return 1


answers = Answers()
'''
    with pytest.raises(HiddenTestFailed) as info:
        run_hidden_tests('got = freeze(answers, "answers")\ncheck(got == {"A": 1})', learner(source))
    assert "answers is an object of a class of your own" in str(info.value)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_a_refusal_never_spells_what_the_learner_chose():
    """A refusal reaches the feedback: the learner's class, exception or key names are not in it (a function
    the grader calls sees the hidden inputs and could spell them there)."""
    source = ("def add_one(x):\n    return type(f'x_{x}', (), {})()\n\n\n"
              "def add_two(x):\n    raise type(f'E_{x}', (Exception,), {})()\n\n\n"
              "def add_three(x):\n    return {f'k_{x}': object()}\n")
    for name in ("add_one", "add_two", "add_three"):
        with pytest.raises(HiddenTestFailed) as info:
            run_hidden_tests(f"check(call({name}, 7919) == 7920)", learner(source))
        assert "7919" not in str(info.value) and str(info.value) != GENERIC_FAILURE, name


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_freeze_copies_plain_data_exactly():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    frozen = freeze({"a": [1, 2.5, (np.int64(3), np.float32(0.5), np.bool_(True))], "b": {1, 2}, "c": array,
                     "d": None, "e": "x"})
    assert frozen["a"] == [1, 2.5, (3, 0.5, True)] and type(frozen["a"][2][0]) is int
    assert type(frozen["a"][2][2]) is bool and frozen["b"] == {1, 2} and frozen["d"] is None
    assert type(frozen["c"]) is np.ndarray and frozen["c"].dtype == np.float32
    array[0, 0] = 99  # a copy: what the learner keeps changing later is not what is compared
    assert frozen["c"][0, 0] == 0
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(AnswerRefused, match="contains itself"):
        freeze(cycle)
    with pytest.raises(AnswerRefused, match="subclass of float"):
        freeze(type("F", (float,), {})(1.0))
    with pytest.raises(AnswerRefused, match="`matrix`"):
        freeze(np.matrix([1]))


def test_call_runs_the_learner_on_a_thread_of_its_own_and_refuses_what_it_leaves_behind():
    namespace = learner('''
import sys
import threading
import time


def depth():
    frame, names = sys._getframe(), []
    while frame is not None:
        names.append(frame.f_code.co_filename)
        frame = frame.f_back
    return names


def _later():
    time.sleep(5)  # then it could read the comparison's frames (sys._current_frames)


def leaves_a_thread():
    threading.Thread(target=_later, daemon=True).start()
    return 1


def traces_later():
    threading.settrace(lambda *args: None)
    return 1


def raises():
    return {}["hidden input"]
''')
    files = call(namespace["depth"])
    assert files[0] == LEARNER_FILE and all("test_grading_isolation" not in f for f in files)
    assert call_each(lambda_free_add, [(1, 2), (3, 4)]) == [3, 7]
    with pytest.raises(AnswerRefused, match="left a thread running"):
        call(namespace["leaves_a_thread"])
    with pytest.raises(AnswerRefused, match="tracer"):
        call(namespace["traces_later"])
    assert threading._trace_hook is None  # put back
    with pytest.raises(AnswerRefused, match="raised KeyError") as info:
        call(namespace["raises"])
    assert "hidden input" not in str(info.value)


def lambda_free_add(a, b):
    return a + b


def test_call_takes_no_function_of_the_hidden_block():
    with pytest.raises(HiddenTestFailed):  # ValueError inside the block: it fails, whatever the answer
        run_hidden_tests("check(call(lambda: add_one(1)) == 2)", learner("def add_one(x):\n    return x + 1\n"))


FORBIDDEN = 'FORBIDDEN = {"fractions:Fraction": "exact fractions do the rounding for you"}\n'
HIDDEN_WARPS = FORBIDDEN + "check(call_each(warps, [(1,), (33,), (1024,)]) == [1, 2, 32])"


@pytest.mark.parametrize("source", [
    "import fractions, math\n\n\ndef warps(t, exact=fractions.Fraction):\n    return math.ceil(exact(t, 32))\n",
    "import math\n\n\ndef warps(t, *, exact=__import__('fractions').Fraction):\n    return math.ceil(exact(t, 32))\n",
    ("import math\n\n\ndef _make():\n    from fractions import Fraction as exact\n\n"
     "    def warps(t):\n        return math.ceil(exact(t, 32))\n\n    return warps\n\n\nwarps = _make()\n"),
    "import fractions as f, math\n\n\ndef warps(t):\n    return math.ceil(getattr(f, 'Frac' + 'tion')(t, 32))\n",
    "import math\nfrom fractions import Fraction\n\n\ndef warps(t):\n    return math.ceil(Fraction(t) / 32)\n",
])
def test_a_forbidden_function_trips_however_it_is_reached(source):
    with pytest.raises(HiddenTestFailed) as info:
        run_hidden_tests(HIDDEN_WARPS, learner(source))
    assert "forbids: fractions:Fraction: exact fractions do the rounding for you" in str(info.value)
    import fractions

    assert fractions.Fraction.__new__.__code__.co_name == "__new__"  # unwrapped afterwards


def test_the_grader_may_call_what_it_forbids_the_learner():
    namespace = learner("def warps(t):\n    return -(-t // 32)\n")
    run_hidden_tests(HIDDEN_WARPS + "\nfrom fractions import Fraction\ncheck(Fraction(1, 2) == 0.5)", namespace)


def test_armed_records_learner_calls_only_and_always_unwraps():
    import json

    namespace = learner("import json\n\n\ndef dump(x, f=json.dumps):\n    return f(x)\n")
    with armed({"json:dumps": "no JSON here"}) as trips:
        json.dumps([1])  # this test file is outside the libraries and the package: it counts as the learner's
        assert trips.calls == ["json:dumps: no JSON here"]
    with armed({"json:dumps": "no JSON here"}) as trips:
        namespace["dump"]([1])
    assert trips.tripped and json.dumps.__code__.co_name == "dumps"
    with pytest.raises(RuntimeError), armed({"json:dumps": "x"}):
        raise RuntimeError
    assert json.dumps.__code__.co_name == "dumps" and "__gpucourse_tripwire__" not in vars(json)
    with pytest.raises(ValueError, match="no attribute"):
        resolve("json:nothing_here")
    with pytest.raises(ValueError, match="package.module:qualname"):
        resolve("json.dumps")


def test_a_hidden_block_declares_its_forbidden_targets_as_a_literal():
    assert forbidden_targets(HIDDEN_WARPS) == {"fractions:Fraction": "exact fractions do the rounding for you"}
    assert forbidden_targets("check(True)") == {}
    with pytest.raises(ValueError):
        forbidden_targets("FORBIDDEN = {'a:b': 1}")


KERNEL_WALK = '''
import sys

from greenlet import getcurrent
from gpucourse.measure import runtime

cuda = runtime.cuda


@cuda.jit
def add_ten(a, out):
    i = cuda.threadIdx.x
    value = a[i] + 10
    # under the microscope a kernel is Python, run in a greenlet: its parent's frames lead to the caller's
    for frame in (getattr(sys, "_get" + "frame")(0), getattr(getcurrent().parent, "gr_" + "frame")):
        while frame is not None:
            if "expected" in frame.f_globals:
                value = frame.f_globals["expected"][i]
            frame = frame.f_back
    out[i] = value
'''
HIDDEN_TRACED = ("a = np.arange(8, dtype=np.float32)\nexpected = a + 99\nout = np.zeros(8, np.float32)\n"
                 "report = {how}(add_ten, 1, 8, a.copy(), out)\ncheck(np.array_equal(out, expected))")


def test_observe_traces_the_learner_kernel_on_its_own_thread():
    from gpucourse.microscope import trace

    # the kernel, traced where the hidden block runs, reads the expected values and passes a wrong test …
    run_hidden_tests(HIDDEN_TRACED.format(how="trace"), learner(KERNEL_WALK, trace=trace))
    # … and traced by `observe` (on a fresh thread) finds nothing: it fails
    with pytest.raises(HiddenTestFailed):
        run_hidden_tests(HIDDEN_TRACED.format(how="observe"), learner(KERNEL_WALK))
    # while an honest kernel, traced by the grader's own `observe` in a hidden block, passes
    run_hidden_tests(HIDDEN_TRACED.format(how="observe").replace("a + 99", "a + 10"), learner(KERNEL_WALK))


def test_observe_returns_the_course_report_rebuilt_from_plain_data():
    from gpucourse.microscope.report import Report
    from gpucourse.tooling.grading.frozen import observe

    namespace = learner(KERNEL_WALK)
    out = np.zeros(8, np.float32)
    report = observe(namespace["add_ten"], 1, 8, np.arange(8, dtype=np.float32), out, schedule="random", seed=1)
    assert type(report) is Report and report._tracer is None
    assert freeze(vars(report)) == vars(report)  # nothing in it but plain data
    assert report.race_count() == 0 and len(report.branches()) > 0 and report.threads == 8
    assert out.tolist() == list(range(10, 18))  # what the kernel wrote is in the grader's array
    with pytest.raises(AnswerRefused, match="raised IndexError"):  # out of bounds: the microscope's error
        observe(namespace["add_ten"], 1, 16, np.arange(8, dtype=np.float32), out)


def test_the_grader_reads_nothing_of_a_learner_object_on_its_own_thread():
    namespace = learner('''
import threading

seen = []


class Sneaky:
    def __getattr__(self, name):  # would run wherever the grader asks it for an attribute
        seen.append(threading.current_thread().name)
        raise AttributeError(name)

    def __call__(self):
        return 1


sneaky = Sneaky()
''')
    assert call(namespace["sneaky"]) == 1
    assert threading.current_thread().name not in namespace["seen"]


def test_the_waiting_grader_is_out_of_sight_of_the_learner_thread():
    namespace = learner('''
import sys

# sys._current_frames, found without spelling it, taken before any call of the grader's
_frames = [value for name, value in vars(sys).items() if name.endswith("nt_frames")][0]


def add_one(x):
    for frame in _frames().values():
        while frame is not None:
            for scope in (frame.f_locals, frame.f_globals):
                if "expected" in scope:
                    return scope["expected"][x]
            frame = frame.f_back
    return x
''')
    with pytest.raises(HiddenTestFailed):
        run_hidden_tests(HIDDEN_CALLED, namespace)
    frames = __import__("sys")._current_frames()
    assert threading.get_ident() in frames  # out of a call, every thread is there


def test_observe_keeps_the_races_of_a_racy_kernel():
    from gpucourse.microscope import trace
    from gpucourse.tooling.grading.frozen import observe

    namespace = learner('''
from gpucourse.measure import runtime
from numba import float32

cuda = runtime.cuda


@cuda.jit
def shift(x, out):
    shared = cuda.shared.array(32, float32)
    i = cuda.threadIdx.x
    shared[i] = x[i]
    out[i] = shared[(i + 1) % 32]  # no barrier: a race
''')
    args = (1, 32, np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
    seen = observe(namespace["shift"], *args, schedule="random", seed=1)
    direct = trace(namespace["shift"], *args, schedule="random", seed=1)
    assert seen.race_count() == direct.race_count() > 0
    assert seen.races().equals(direct.races())  # the threads shown as the scheduler shows them


def test_call_reads_no_attribute_of_a_learner_object_on_the_grader_thread():
    seen = []
    ns = learner('''
import threading


class Sneaky:
    def __getattr__(self, name):  # would run on the grader's thread, right below the hidden block
        SEEN.append(threading.current_thread().name)
        raise AttributeError(name)

    def __call__(self):
        return 1
''', SEEN=seen)
    assert call(ns["Sneaky"]()) == 1
    assert "MainThread" not in seen, seen


def test_the_forbidden_reference_handed_in_as_the_answer_is_refused():
    from numba import cuda

    from gpucourse.lessons.races import kernels as lesson
    from gpucourse.tooling.grading.frozen import launch
    from gpucourse.tooling.grading.tripwire import handed_in

    target = "gpucourse.lessons.races.kernels:histogram_atomic.py_func"
    rewrapped = cuda.jit(lesson.histogram_atomic.py_func)  # a new kernel made of the lesson's Python
    with armed({target: "write it yourself"}):
        for answer in (lesson.histogram_atomic, rewrapped):
            assert handed_in(answer) == f"{target}: write it yourself"
            with pytest.raises(AnswerRefused, match="forbids"):
                launch(answer, 1, 32, np.zeros(4, np.float32), np.zeros(2, np.int32))
            with pytest.raises(AnswerRefused, match="forbids"):
                call(len, answer)  # an argument handed to the grader's harness, too
    assert handed_in(lesson.histogram_atomic) is None  # disarmed: nothing is remembered


def test_a_counter_freezes_to_a_dict_and_its_subclass_is_refused():
    from collections import Counter, OrderedDict

    assert type(freeze(Counter(a=2))) is dict and freeze(Counter(a=2)) == {"a": 2}
    assert freeze(OrderedDict(b=1)) == {"b": 1}
    ns = learner("from collections import Counter\nclass Lying(Counter):\n    pass\n")
    with pytest.raises(AnswerRefused, match="subclass of dict"):
        freeze(ns["Lying"](a=1))


def test_trace_launch_runs_the_microscope_on_the_learner_thread_and_refuses_an_access_out_of_bounds():
    from gpucourse.measure import runtime
    from gpucourse.tooling.grading.traced import trace_launch

    ns = learner('''
@cuda.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i]


@cuda.jit
def unchecked(src, dst):
    i = cuda.grid(1)
    dst[i] = src[i]
''', cuda=runtime.cuda)
    src, dst = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    assert trace_launch(ns["copy"], 2, 32, src, dst) is None
    assert np.array_equal(dst, src)
    got = trace_launch({"k": ns["copy"]}, 2, 32, src, dst, key="k", metrics=["launch__thread_count"])
    assert got == {"launch__thread_count": 64}
    with pytest.raises(AnswerRefused, match="IndexError"):
        trace_launch(ns["unchecked"], 2, 32, src, np.zeros(40, np.float32))


def test_freeze_runs_no_metaclass_of_the_learner():
    ran = []
    ns = learner('''
class Meta(type):
    def __eq__(cls, other):
        RAN.append("__eq__")
        return True

    __hash__ = type.__hash__

    @property
    def __module__(cls):
        RAN.append("__module__")
        return "torch"


class Answer(metaclass=Meta):
    pass
''', RAN=ran)
    ran.clear()
    with pytest.raises(AnswerRefused, match="class of your own"):
        freeze(ns["Answer"]())
    assert ran == [], ran



def test_a_forbidden_function_inside_a_standard_library_wrapper_is_refused():
    """functools.partial (or a subclass of it with a hostile __getattribute__), a bound method and
    functools.cache around the forbidden function: called by the grader's thread, the function inside would
    run with no learner frame on the stack (no call recorded), so handed_in sees through the wrapper."""
    import functools
    import types

    from gpucourse.lessons.attention import model
    from gpucourse.tooling.grading.tripwire import handed_in

    class Opaque(functools.partial):
        def __getattribute__(self, name):
            raise RuntimeError("no learner code may run while the grader looks")

    target = "gpucourse.lessons.attention.model:naive_bytes"
    wrapped = [functools.partial(model.naive_bytes), functools.partial(functools.partial(model.naive_bytes, 64)),
               Opaque(model.naive_bytes), types.MethodType(model.naive_bytes, 64), functools.cache(model.naive_bytes),
               functools.partial(map, model.naive_bytes), functools.partial(len, key=model.naive_bytes),
               functools.partial(staticmethod(model.naive_bytes)), classmethod(model.naive_bytes)]
    with armed({target: "count it yourself"}):
        for answer in wrapped:
            assert handed_in(answer) == f"{target}: count it yourself", answer
            with pytest.raises(AnswerRefused, match="forbids"):
                call(answer, 64, 16)
        assert handed_in(functools.partial(model.flash_bytes)) is None  # another function: not forbidden
        assert call(functools.partial(model.flash_bytes, 64), 16, 16, 16) == model.flash_bytes(64, 16, 16, 16)

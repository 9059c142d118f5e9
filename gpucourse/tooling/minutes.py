"""Honest minutes: how long a lesson or a lab takes a novice working alone, counted from its source.

THE RULE (the one place it is written down; headers, instructor pacing and agendas are held to it by
``tests/test_minutes.py``):

    minutes = prose words / READING_WORDS_PER_MIN
            + code cells × CODE_CELL_MIN            (read the call, run it, read its output)
            + Predict questions × PREDICT_MIN       (write an answer down, compare it after the reveal)
            + explorers × EXPLORER_MIN              (a widget: move its sliders, read the chart)
            + solution lines × SOLUTION_LINE_MIN    (labs: write, run the checks, debug)
            + solution cells × SOLUTION_CELL_MIN    (labs: read the spec again, find the lesson's example)

* Prose is every word of the markdown cells (``<details>`` blocks included: a learner opens them);
  code cells are the lesson's own cells, not the "Open in Colab" cells the build adds.
* 130 words a minute for technical prose: the rate of the course's learner review ("≈130 words/min
  for technical prose"), about half the 238 words/min Brysbaert (2019, "How many words do we read
  per minute?", *Journal of Memory and Language* 109) finds for adults reading non-fiction silently:
  a novice reads a new technical idea, its picture and its caveats to learn them, not to skim.
* A Predict is a ``### Predict`` heading (or a ``### A claim to test``); an explorer is a code cell
  that calls a builder named ``*_explorer(`` or ``*_widget(``.
* Code cells, Predicts and explorers: one minute to read a short call, run it (the simulator takes
  seconds) and read its output; three to write a prediction down and compare it after the reveal;
  three to move an explorer's sliders and read its chart. A prediction's own code cells
  (``prediction_x = ...``, ``read_back(...)``) are part of its three minutes.
* Labs: a novice writes, runs and debugs about one line of GPU code a minute (solution lines,
  comments and blank lines not counted), plus two minutes per exercise to re-read the spec and find
  the lesson's example. With these constants the rule lands inside or near the review's
  estimate for most labs (its 60–90 min for lab 04: 66; 20–30 for lab 01: 31).
* Calibration: the rule's course total (about 18 h) falls inside the review's 15–20 h; the review's
  per-lesson ranges are themselves estimates, so the rule is held to none of them.
* Sections whose ``##`` heading says **optional** are counted apart (``optional``), not in ``core``;
  ``## Part X`` headings split a lesson into parts, counted each.

Stated minutes are read from the sources: a lesson's or lab's first cell says ``N minutes`` (the
core) and, where it has optional sections, ``M optional minutes``; a heading may carry ``(N min)``
or ``(optional, N min)``. A stated number passes within ``TOLERANCE_MIN``/``TOLERANCE_SHARE`` of the
rule; an agenda slot passes when it is at least the rule's minutes less that tolerance (more is a buffer).

Run ``python -m gpucourse minutes`` for the table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpucourse.errors import InvalidConfig

ROOT = Path(__file__).resolve().parents[2]

READING_WORDS_PER_MIN = 130
CODE_CELL_MIN = 1.0
PREDICT_MIN = 3.0
EXPLORER_MIN = 3.0
SOLUTION_LINE_MIN = 1.0
SOLUTION_CELL_MIN = 2.0

# A stated number passes when |stated - rule| <= max(TOLERANCE_MIN, TOLERANCE_SHARE × rule).
TOLERANCE_MIN = 3.0
TOLERANCE_SHARE = 0.10

_CELL = re.compile(r"^# %%(?P<rest>.*)$", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_PREDICT = re.compile(r"^#{2,4}\s+(Predict|A claim to test)\b")
_EXPLORER = re.compile(r"\w+_(?:explorer|widget)\(")
_PREDICTION_CELL = re.compile(r"^prediction\w* = |read_back\(", re.M)
_WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
_STATED_SECTION = re.compile(r"\((optional, )?(\d+) min\)")


@dataclass
class Counts:
    words: int = 0
    code_cells: int = 0
    predicts: int = 0
    explorers: int = 0
    solution_lines: int = 0
    solution_cells: int = 0

    def add(self, other: Counts) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def teaching_min(self) -> float:
        """Reading and running: what a header calls teaching."""
        return self.words / READING_WORDS_PER_MIN + self.code_cells * CODE_CELL_MIN

    @property
    def exercises_min(self) -> float:
        """Predictions, explorers and (labs) written code: what a header calls exercises."""
        return (self.predicts * PREDICT_MIN + self.explorers * EXPLORER_MIN
                + self.solution_lines * SOLUTION_LINE_MIN + self.solution_cells * SOLUTION_CELL_MIN)

    @property
    def minutes(self) -> float:
        return self.teaching_min + self.exercises_min


@dataclass
class Section:
    heading: str
    part: str | None
    optional: bool
    stated_min: int | None  # "(N min)" in the heading
    counts: Counts = field(default_factory=Counts)


@dataclass
class Unit:
    """A lesson or a lab: its sections, the rule's minutes and what its first cell states."""

    name: str  # "04" or "lab04"
    path: Path
    sections: list[Section]
    stated_core_min: int | None
    stated_optional_min: int | None

    def counts(self, optional: bool = False, part: str | None = None) -> Counts:
        counts = Counts()
        for s in self.sections:
            if s.optional == optional and (part is None or s.part == part):
                counts.add(s.counts)
        return counts

    def _total(self, optional: bool, part: str | None = None) -> float:
        return self.counts(optional, part).minutes

    @property
    def core_min(self) -> float:
        return self._total(False)

    @property
    def optional_min(self) -> float:
        return self._total(True)

    def part_min(self, part: str) -> float:
        if part not in self.parts:
            raise InvalidConfig(f"{self.name} has no part {part!r} (parts: {', '.join(self.parts) or 'none'})")
        return self._total(False, part)

    @property
    def parts(self) -> list[str]:
        return list(dict.fromkeys(s.part for s in self.sections if s.part))

    def exercise_min(self, numbers: set[int]) -> float:
        """Minutes of a lab's exercises ``numbers`` (``## Exercise N`` sections)."""
        counts = Counts()
        for s in self.sections:
            found = re.match(r"Exercise (\d+)", s.heading)
            if found and int(found.group(1)) in numbers:
                counts.add(s.counts)
        return counts.minutes


def within_tolerance(stated: float, rule: float) -> bool:
    return abs(stated - rule) <= max(TOLERANCE_MIN, TOLERANCE_SHARE * rule)


def _cells(text: str) -> list[tuple[str, str]]:
    """(kind, body) for each cell of a jupytext percent source; kind is "markdown" or "code"."""
    marks = list(_CELL.finditer(text))
    cells = []
    for i, mark in enumerate(marks):
        body = text[mark.end():marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        kind = "markdown" if "[markdown]" in mark.group("rest") else "code"
        cells.append((kind, body.strip("\n")))
    return cells


def _markdown_lines(body: str) -> list[str]:
    return [line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines()]


def parse(text: str, name: str = "source", path: Path | None = None) -> Unit:
    """Count a jupytext percent source (a lesson or an nbgrader lab) into sections."""
    cells = _cells(text)
    if not cells:
        raise InvalidConfig(f"{name}: no jupytext cells (`# %%`) found")
    first = "\n".join(_markdown_lines(cells[0][1])) if cells[0][0] == "markdown" else ""
    core = re.search(r"(\d+) minutes", first)
    optional = re.search(r"(\d+) optional minutes", first)
    sections = [Section("(opening)", None, False, None)]
    part = None
    for kind, body in cells:
        if kind == "code":
            counts = sections[-1].counts
            if "### BEGIN SOLUTION" in body:
                counts.solution_cells += 1
                for chunk in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", body, re.S):
                    counts.solution_lines += sum(1 for ln in chunk.splitlines()
                                                 if ln.strip() and not ln.strip().startswith("#"))
            elif not _PREDICTION_CELL.search(body):  # a prediction's own cells are in PREDICT_MIN
                counts.code_cells += 1
                counts.explorers += len(_EXPLORER.findall(body))
            continue
        for line in _markdown_lines(body):
            heading = _HEADING.match(line)
            if heading and len(heading.group(1)) == 2:
                title = heading.group(2).strip()
                found_part = re.match(r"Part ([A-Z])\b", title)
                if found_part:
                    part = found_part.group(1)
                stated = _STATED_SECTION.search(title)
                sections.append(Section(title, part, "optional" in title.lower(),
                                        int(stated.group(2)) if stated else None))
            if _PREDICT.match(line):
                sections[-1].counts.predicts += 1
            if not line.lstrip().startswith("<"):  # html tags (<details>) are not prose
                sections[-1].counts.words += len(_WORD.findall(line))
    return Unit(name, path or Path(name), sections, int(core.group(1)) if core else None,
                int(optional.group(1)) if optional else None)


def unit_name(path: Path) -> str:
    stem = path.stem
    return stem.split("_")[0] if not stem.startswith("lab") else stem.split("_")[0]


def load(path: Path) -> Unit:
    path = Path(path)
    if not path.exists():
        raise InvalidConfig(f"{path}: no such lesson or lab source")
    return parse(path.read_text(encoding="utf-8"), unit_name(path), path)


def lesson_paths(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]*_*.py"))


def lab_paths(root: Path = ROOT) -> list[Path]:
    """Every lab in solutions/ (whatever labs exist: a new one is counted without a change here)."""
    return sorted(p for d in (root / "solutions").glob("lab*") if (p := d / f"{d.name}.py").exists())


def all_units(root: Path = ROOT) -> dict[str, Unit]:
    return {u.name: u for u in map(load, lesson_paths(root) + lab_paths(root))}


def rounded(minutes: float) -> int:
    """What a header states: the rule's minutes to the nearest 5 (always within ``TOLERANCE_MIN``)."""
    return int(5 * math.floor(minutes / 5 + 0.5))


def table(root: Path = ROOT) -> str:
    rows = [f"{'unit':8s} {'stated':>6s} {'rule':>6s} {'opt. stated':>11s} {'opt. rule':>9s}  "
            f"{'words':>6s} {'code':>4s} {'pred':>4s} {'expl':>4s} {'sol.lines':>9s}  ok"]
    total_stated = total_rule = 0.0
    for unit in all_units(root).values():
        counts = Counts()
        for s in unit.sections:
            counts.add(s.counts)
        ok = unit.stated_core_min is not None and within_tolerance(unit.stated_core_min, unit.core_min)
        if unit.optional_min:
            ok = ok and unit.stated_optional_min is not None and within_tolerance(unit.stated_optional_min,
                                                                                  unit.optional_min)
        total_stated += unit.stated_core_min or 0
        total_rule += unit.core_min
        rows.append(f"{unit.name:8s} {unit.stated_core_min or '?':>6} {unit.core_min:6.1f} "
                    f"{unit.stated_optional_min or '-':>11} {unit.optional_min:9.1f}  {counts.words:6d} "
                    f"{counts.code_cells:4d} {counts.predicts:4d} {counts.explorers:4d} {counts.solution_lines:9d}"
                    f"  {'yes' if ok else 'NO'}")
    rows.append(f"{'total':8s} {total_stated:6.0f} {total_rule:6.1f}   (core minutes; "
                f"{total_rule / 60:.1f} h by the rule)")
    return "\n".join(rows)


def main(root: Path = ROOT) -> int:
    print(table(root))
    found = problems(root)
    for problem in found:
        print(f"minutes: {problem}")
    return 1 if found else 0


# ---------------------------------------------------------------------------------------------
# Consistency: every stated minute in the course against the rule (tests/test_minutes.py).

_SPLIT = re.compile(r"(?:part ([A-Z]) (\d+) min \()?[Tt]eaching (\d+)(?: min)? · "
                    r"(?:exercises|predictions and explorers) (\d+)")
_LAB_MENTION = re.compile(r"\blab (\d\d[a-z]?)\b[^(\n]{0,60}\((\d+) min")
MAX_LESSON_MIN = 60  # a lesson (or a part of one) longer than this must be split or lose optional sections


def _first_cell(unit: Unit) -> str:
    cells = _cells(unit.path.read_text(encoding="utf-8"))
    return " ".join(" ".join(_markdown_lines(cells[0][1])).split())


def _off(where: str, stated: float, rule: float) -> str | None:
    if within_tolerance(stated, rule):
        return None
    tolerance = max(TOLERANCE_MIN, TOLERANCE_SHARE * rule)
    return f"{where}: states {stated:g} min, the rule counts {rule:.1f} (tolerance ±{tolerance:.1f})"


def unit_problems(unit: Unit, units: dict[str, Unit]) -> list[str]:
    """What a lesson's or lab's own text states against the rule."""
    where = unit.path.name
    if unit.stated_core_min is None:
        return [f"{where}: its first cell states no minutes; write e.g. '*About {rounded(unit.core_min)} minutes.*' "
                f"(the rule counts {unit.core_min:.1f})"]
    found = [_off(f"{where} header", unit.stated_core_min, unit.core_min)]
    if unit.optional_min and unit.stated_optional_min is None:
        found.append(f"{where}: has optional sections ({unit.optional_min:.1f} min by the rule) but its first cell "
                     "states no 'N optional minutes'")
    elif unit.stated_optional_min is not None:
        found.append(_off(f"{where} header, optional", unit.stated_optional_min, unit.optional_min))
    for section in unit.sections:
        if section.stated_min is None:
            continue
        part = re.match(r"Part ([A-Z])\b", section.heading)
        rule = unit.part_min(part.group(1)) if part else section.counts.minutes
        found.append(_off(f"{where} '{section.heading}'", section.stated_min, rule))
    first = _first_cell(unit)
    for split in _SPLIT.finditer(first):
        part, part_min, teaching, exercises = split.groups()
        counts = unit.counts(False, part)
        total = int(part_min) if part else unit.stated_core_min
        if int(teaching) + int(exercises) != total:
            found.append(f"{where}: teaching {teaching} + exercises {exercises} is not the stated {total} min")
        found.append(_off(f"{where} teaching{' of part ' + part if part else ''}", int(teaching), counts.teaching_min))
        found.append(_off(f"{where} exercises{' of part ' + part if part else ''}", int(exercises),
                          counts.exercises_min))
    for lab, minutes in _LAB_MENTION.findall(first):
        found += _lab_mention(where, lab, int(minutes), units)
    if not unit.name.startswith("lab"):
        for part in unit.parts or [None]:
            rule = unit.part_min(part) if part else unit.core_min
            if rule > MAX_LESSON_MIN:
                found.append(f"{where}{' part ' + part if part else ''}: {rule:.1f} min by the rule, over "
                             f"{MAX_LESSON_MIN}: split it into parts or mark sections optional")
    return [p for p in found if p]


def _lab_mention(where: str, lab: str, minutes: int, units: dict[str, Unit]) -> list[str]:
    unit = units.get(f"lab{lab}")
    if unit is None:
        return [f"{where}: names lab {lab}, which does not exist"]
    if unit.stated_core_min != minutes:
        return [f"{where}: says lab {lab} takes {minutes} min, its header says {unit.stated_core_min}"]
    return []


def instructor_problems(root: Path, units: dict[str, Unit]) -> list[str]:
    """instructor/README.md's table and each lesson's notes against the lessons' and labs' headers."""
    found = []
    readme = (root / "instructor" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[(\d\d[a-z]?) [^]]*\]\([^)]*\) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|", readme, re.M)
    if not rows:
        found.append("instructor/README.md: no lesson table found")
    for name, lesson_time, lab, lab_time in rows:
        unit = units.get(name)
        if unit is None:
            found.append(f"instructor/README.md: lesson {name} does not exist")
            continue
        numbers = re.match(r"(\d+) min", lesson_time.strip())
        if not numbers or int(numbers.group(1)) != unit.stated_core_min:
            found.append(f"instructor/README.md: lesson {name} '{lesson_time.strip()}', its header says "
                         f"{unit.stated_core_min} min")
        optional = re.search(r"(\d+) optional", lesson_time)
        if (int(optional.group(1)) if optional else None) != unit.stated_optional_min:
            found.append(f"instructor/README.md: lesson {name} optional '{lesson_time.strip()}', its header says "
                         f"{unit.stated_optional_min}")
        lab_name = re.match(r"lab(\d\d[a-z]?)_", lab.strip())
        if lab_name:
            lab_minutes = re.match(r"(\d+) min", lab_time.strip())
            found += _lab_mention("instructor/README.md", lab_name.group(1),
                                  int(lab_minutes.group(1)) if lab_minutes else -1, units)
    for path in sorted((root / "instructor").glob("[0-9][0-9]*_*.md")):
        name = path.stem.split("_")[0]
        text = path.read_text(encoding="utf-8")
        pacing = re.search(r"Pacing \((\d+) min([^)]*)\)", text)
        unit = units.get(name)
        if unit is None or pacing is None:
            found.append(f"instructor/{path.name}: no 'Pacing (N min' line" if unit else
                         f"instructor/{path.name}: lesson {name} does not exist")
            continue
        if int(pacing.group(1)) != unit.stated_core_min:
            found.append(f"instructor/{path.name}: pacing {pacing.group(1)} min, the lesson's header says "
                         f"{unit.stated_core_min}")
        optional = re.search(r"(\d+) optional", pacing.group(2))
        if (int(optional.group(1)) if optional else None) != unit.stated_optional_min:
            found.append(f"instructor/{path.name}: pacing's optional minutes differ from the lesson's header "
                         f"({unit.stated_optional_min})")
        for lab, minutes in re.findall(r"\b[Ll]ab (\d\d[a-z]?)\b[^(\n]{0,30}\([^)]{0,40}?(\d+) min", text):
            found += _lab_mention(f"instructor/{path.name}", lab, int(minutes), units)
        found += _pacing_sum(path.name, text, (unit.stated_core_min or 0) + (unit.stated_optional_min or 0))
    return found


def _pacing_block(text: str) -> str:
    """The pacing paragraph of a lesson's notes, with the bullets or the table that follow it."""
    lines = text[text.index("Pacing ("):].splitlines()
    block = [lines[0]]
    for index, line in enumerate(lines[1:], 1):
        if not line.strip():
            following = next((ln for ln in lines[index + 1:] if ln.strip()), "")
            if not following.startswith(("* ", "|")):
                break
        block.append(line)
    return "\n".join(block)


def _pacing_sum(name: str, text: str, total: int) -> list[str]:
    """A table's minute ranges run from 0 to the total without a gap; a paragraph's items add up to it."""
    block = _pacing_block(text)
    ranges = re.findall(r"^\| (\d+)–(\d+) \|", block, re.M)
    if ranges:
        ends = [0] + [int(end) for _, end in ranges]
        if [int(start) for start, _ in ranges] != ends[:-1] or ends[-1] != total:
            return [f"instructor/{name}: the pacing table's minutes do not run from 0 to {total} without a gap"]
        return []
    body = block.split(")", 1)[1]  # without the "Pacing (N min ...)" total itself
    while re.search(r"\([^()]*\)", body):
        body = re.sub(r"\([^()]*\)", "", body)  # part totals, lab times and remarks in parentheses
    items = sum(int(n) for n in re.findall(r"(\d+) min\b", body))
    if items != total:
        return [f"instructor/{name}: the pacing's items add up to {items} min, the lesson states {total} "
                "(core and optional)"]
    return []


def _clock(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def agenda_problems(text: str, units: dict[str, Unit], where: str = "instructor/agendas.md") -> list[str]:
    """Each agenda's clock adds up, fits its stated length, and gives every unit the rule's minutes."""
    found: list[str] = []
    agendas = 0
    for block in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        heading = block.splitlines()[0] if block.startswith("#") else ""
        rows = re.findall(r"^\| (\d{1,2}:\d\d) \| (\d+) \|([^|]*)\|([^|]*)\|$", block, re.M)
        if not rows:
            continue
        agendas += 1
        hours = re.search(r"(\d+) hours", heading)
        span = re.search(r"(\d\d:\d\d)–(\d\d:\d\d)", heading) or re.search(r"(\d\d:\d\d)–(\d\d:\d\d)", block)
        if hours:
            start, end = 0, int(hours.group(1)) * 60
        elif span:
            start, end = _clock(span.group(1)), _clock(span.group(2))
        else:
            found.append(f"{where} '{heading}': states neither 'N hours' nor a span 'HH:MM–HH:MM'")
            continue
        clock = start
        for time, minutes, what, _notes in rows:
            if _clock(time) != clock:
                found.append(f"{where} '{heading}': {what.strip()} starts at {time}, the row before ends at "
                             f"{clock // 60}:{clock % 60:02d}")
            clock = _clock(time) + int(minutes)
            rule = _slot_rule(what.strip(), units)
            if isinstance(rule, str):
                found.append(f"{where} '{heading}': {rule}")
            elif rule is not None and int(minutes) < rule - max(TOLERANCE_MIN, TOLERANCE_SHARE * rule):
                found.append(f"{where} '{heading}': {what.strip()} gets {minutes} min, the rule counts {rule:.1f}")
        if clock > end:
            found.append(f"{where} '{heading}': ends at {clock // 60}:{clock % 60:02d}, after its stated end "
                         f"{end // 60}:{end % 60:02d}")
    if agendas == 0:
        found.append(f"{where}: no agenda tables found")
    return found


def _slot_rule(what: str, units: dict[str, Unit]) -> float | str | None:
    """The rule's minutes for an agenda row's 'What' (None: not a lesson or lab, or abridged)."""
    lab = re.match(r"Lab (\d\d[a-z]?)\b", what)
    lesson = re.match(r"(\d\d[a-z]?) ", what)
    if not (lab or lesson) or "abridged" in what:
        return None
    name = f"lab{lab.group(1)}" if lab else lesson.group(1)
    unit = units.get(name)
    if unit is None:
        return f"{what}: no such lesson or lab"
    exercises = re.search(r"exercises? (\d+)(?:–(\d+))?", what)
    if lab and exercises:
        first, last = int(exercises.group(1)), int(exercises.group(2) or exercises.group(1))
        return unit.exercise_min(set(range(first, last + 1)))
    part = re.search(r"part ([A-Z])\b", what)
    if part:
        if part.group(1) not in unit.parts:
            return f"{what}: {name} has no part {part.group(1)}"
        return unit.part_min(part.group(1))
    return unit.core_min


def problems(root: Path = ROOT) -> list[str]:
    """Every stated minute in the course that disagrees with the rule (empty: all consistent)."""
    units = all_units(root)
    found = [p for unit in units.values() for p in unit_problems(unit, units)]
    found += instructor_problems(root, units)
    found += agenda_problems((root / "instructor" / "agendas.md").read_text(encoding="utf-8"), units)
    return found

"""Measurements published by others, kept apart from the course's own recordings.

Layout: ``data/published/<source-id>/provenance.json`` (who measured, on which GPUs and software,
the repository, path and commit, the licence, how the experiment differs from the course's
kernel) beside one or more small CSVs extracted by ``tools/extract_published.py``. These numbers
are never mixed with ``data/reference/`` and never shown as the learner's GPU: a chart that draws
them names the source with ``caption()``.

    from gpucourse.measure import published
    table = published.load("gpu-benches-stream", "scale_gbps_vs_occupancy")
    published.caption("gpu-benches-stream")
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pandas as pd

from gpucourse.errors import InvalidConfig

PUBLISHED_ROOT = Path(__file__).resolve().parents[2] / "data" / "published"
PROVENANCE_FILE = "provenance.json"
REQUIRED_FIELDS = ("source_id", "title", "measured_by", "repository", "commit", "paths", "licence", "gpus",
                   "software", "method", "columns", "differs_from_course", "retrieved")


def source_ids() -> list[str]:
    return sorted(p.name for p in PUBLISHED_ROOT.iterdir() if (p / PROVENANCE_FILE).is_file())


@cache
def provenance(source_id: str) -> dict:
    path = PUBLISHED_ROOT / source_id / PROVENANCE_FILE
    if not path.is_file():
        raise InvalidConfig(f"no published source {source_id!r}; known: {', '.join(source_ids())}")
    return json.loads(path.read_text())


def tables(source_id: str) -> list[str]:
    provenance(source_id)  # a clear error for an unknown source
    return sorted(p.stem for p in (PUBLISHED_ROOT / source_id).glob("*.csv"))


def load(source_id: str, table: str) -> pd.DataFrame:
    """One published table, with its provenance in ``.attrs["provenance"]``."""
    if table not in tables(source_id):
        raise InvalidConfig(f"{source_id!r} has no table {table!r}; it has: {', '.join(tables(source_id))}")
    data = pd.read_csv(PUBLISHED_ROOT / source_id / f"{table}.csv")
    data.attrs["provenance"] = provenance(source_id)
    return data


def caption(source_id: str) -> str:
    """The line a chart shows under published numbers: who, where, licence. Never 'your GPU'."""
    prov = provenance(source_id)
    return (f"Published by {prov['measured_by']} on {', '.join(prov['gpus'])} — not your GPU "
            f"({prov['repository']} @ {prov['commit'][:7]}; {prov['licence'].split(' (')[0]})")

"""Writing rule-query task sets and their text rendering to disk: the structured tasks (one
JSON line per task), the text rows (one JSON line and one parquet row per request, with
``input`` and ``target`` beside the structured fields, as `datasets.load_dataset("json" |
"parquet", ...)` reads them) and the class mix; and exported CURI episodes re-rendered as
text. Every file is published atomically (`curi.atomic`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from curi.atomic import atomic_path, write_text
from curi.renderers.text import TextRenderer, scene_text
from curi.tasks import ClassMix, format_mix

__all__ = ["ROW_SCHEMA", "export_rule_tasks", "render_episodes_as_text", "write_rows"]

log = logging.getLogger(__name__)

#: Columns of a text row and their types (pyarrow names); None where a field does not apply.
ROW_SCHEMA = {
    "input": "string",
    "target": "string",
    "task": "int64",
    "request": "int64",
    "concept": "string",
    "kind": "string",
    "rule": "string",
    "scene": "int64",
    "label": "int64",
    "reply": "string",
    "qualifier": "string",
    "context_rules": "int64",
}


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([(k, getattr(pa, v)()) for k, v in ROW_SCHEMA.items()])


def write_rows(rows: Iterable[dict], jsonl: Path | None, parquet: Path | None) -> int:
    """Write text rows as JSON lines and / or parquet (columns `ROW_SCHEMA`); returns the
    number of rows. Parquet is written in row groups of 10,000 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, count = _arrow_schema(), 0
    with _maybe(jsonl) as jt, _maybe(parquet) as pt:
        jf = open(jt, "w", encoding="utf-8") if jt else None
        pw = pq.ParquetWriter(pt, schema) if pt else None
        batch: list[dict] = []
        try:
            for row in rows:
                count += 1
                if jf:
                    jf.write(json.dumps(row) + "\n")
                if pw:
                    batch.append(row)
                    if len(batch) == 10_000:
                        pw.write_table(pa.Table.from_pylist(batch, schema=schema))
                        batch.clear()
            if pw and (batch or count == 0):
                pw.write_table(pa.Table.from_pylist(batch, schema=schema))
        finally:
            if jf:
                jf.close()
            if pw:
                pw.close()
    return count


class _maybe:
    """`atomic_path(path)` when a path is given, else a context yielding None."""

    def __init__(self, path):
        self.cm = atomic_path(path) if path is not None else None

    def __enter__(self):
        return self.cm.__enter__() if self.cm else None

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc) if self.cm else False


def export_rule_tasks(
    sampler, out: str | Path, *, n: int, progress: bool = True, meta: dict | None = None
) -> dict[str, Path]:
    """Write tasks 0..n-1 of a `RuleTaskSampler` under the folder `out`.

    Files: ``tasks.jsonl`` (``task.to_dict()`` per line), ``text.jsonl`` and ``text.parquet``
    (one row per request: `TextRenderer.rows`), ``mix.json`` (`curi.tasks.class_mix`) and
    ``meta.json`` (the sampler's settings, the bank, `meta`).

    Returns:
        The paths by name (``tasks``, ``text_jsonl``, ``text_parquet``, ``mix``, ``meta``).
    """
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "tasks": out / "tasks.jsonl",
        "text_jsonl": out / "text.jsonl",
        "text_parquet": out / "text.parquet",
        "mix": out / "mix.json",
        "meta": out / "meta.json",
    }
    text, mix = TextRenderer(sampler.bank), ClassMix()

    def rows(f):  # one pass: each task is written, counted and rendered, then dropped
        for i in tqdm(range(n), desc="rule tasks", unit="task", disable=not progress):
            t = sampler[i].to_dict()
            f.write(json.dumps(t) + "\n")
            mix.add(t)
            yield from text.rows(t)

    with atomic_path(paths["tasks"]) as tmp, open(tmp, "w", encoding="utf-8") as f:
        count = write_rows(rows(f), paths["text_jsonl"], paths["text_parquet"])
    result = mix.result()
    write_text(paths["mix"], json.dumps(result, indent=1) + "\n")
    info = {
        "bank": str(sampler.bank.path),
        "bank_config": sampler.bank.config,
        **sampler.settings(),
        "tasks": n,
        "rows": count,
        **(meta or {}),
    }
    write_text(paths["meta"], json.dumps(info, indent=1) + "\n")
    log.info("rule tasks: %s", format_mix(result).replace("\n", "; "))
    return paths


def render_episodes_as_text(
    path: str | Path, out: str | Path, *, limit: int | None = None, progress: bool = True
) -> dict[str, Path]:
    """Re-render an exported CURI episode file (`curi episodes ... out=FILE`) as text: one row
    per query scene, its ``input`` the support examples then the scene, its ``target`` the
    hidden label (``"1"`` / ``"0"``: plain episodes have no oracle reply; rule-query tasks
    with replies come from `export_rule_tasks`).

    Writes ``text.jsonl`` and ``text.parquet`` under the folder `out`.

    Raises:
        EpisodeFileError: a missing, empty or corrupt episode file.
    """
    from tqdm import tqdm

    from curi.export import count_episodes, read_episode_file

    path, out = Path(path), Path(out)
    renderer = TextRenderer()

    def rows():
        bar = tqdm(
            total=count_episodes(path, limit),
            desc="render text",
            unit="episode",
            disable=not progress,
        )
        for k, ep in enumerate(read_episode_file(path, limit=limit)):
            support = [scene_text(r) for r in ep["support_records"]]
            ids = ep.get("support_ids") or [None] * len(support)
            task = {
                "index": ep.get("index", k),
                "concept": ep["concept_text"],
                "context_rules": [],
                "support": [
                    {"id": i, "label": int(y)}
                    for i, y in zip(ids, ep["support_labels"], strict=True)
                ],
                "requests": [
                    {
                        "kind": "scene",
                        "id": j,
                        "label": int(y),
                        "reply": str(int(y)),
                        "qualifier": "",
                    }
                    for j, y in enumerate(ep["query_labels"])
                ],
            }
            scenes = {j: scene_text(r) for j, r in enumerate(ep["query_records"])}
            for row in renderer.rows(task, support=support, scenes=scenes):
                row["target"] = row["reply"]
                row["scene"] = (ep.get("query_ids") or [None] * len(scenes))[row["scene"]]
                row["qualifier"] = None
                yield row
            bar.update()
        bar.close()

    out.mkdir(parents=True, exist_ok=True)
    paths = {"text_jsonl": out / "text.jsonl", "text_parquet": out / "text.parquet"}
    write_rows(rows(), paths["text_jsonl"], paths["text_parquet"])
    return paths
